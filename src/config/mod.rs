//! devcontainer.json
