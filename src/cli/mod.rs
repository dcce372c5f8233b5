//! The command line: flags are parsed by clap into `Args`, then each command
//! validates and runs. Errors bubble up as `anyhow::Error` and `main` prints
//! the chain on one line.

mod config_cmd;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "workroom",
    version,
    about = "Long-lived development rooms from devcontainer.json"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Cmd,
}

/// Which workspace and which configuration; shared by every command that
/// starts from a workspace.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkspaceArgs {
    /// The workspace folder (default: the current folder).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace_folder: PathBuf,
    /// A devcontainer.json elsewhere than `.devcontainer/devcontainer.json` or `.devcontainer.json`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Print the resolved configuration (substituted, with workspace defaults).
    Config {
        #[command(flatten)]
        workspace: WorkspaceArgs,
        /// The reference CLI's `read-configuration` shape.
        #[arg(long)]
        json: bool,
    },
}

/// Runs the command; the returned code is the process's exit status.
pub fn run(args: Args) -> anyhow::Result<i32> {
    match args.command {
        Cmd::Config { workspace, json } => config_cmd::run(&workspace, json),
    }
}
