//! Daemon memory with panes: opens N panes in a room, each printing full-width
//! lines past its screen and its whole history (10,000 lines, 512 KiB by
//! default: full-width lines fill the byte cap) and then idling, and waits
//! until every pane's screen shows its last line. bench/run then reads the
//! daemon's VmRSS.
//!
//! usage: panes-bench ROOM N COLSxROWS

use std::time::{Duration, Instant};
use workroom::engine::Engine;
use workroom::link::RoomLink;
use workroomd::proto::{Event, PaneRequest, Request, Response};

/// How long a pane may take to print its screenful and show the marker
/// (a loaded 2-core box starts 16 shells in well under a second).
const SCREEN_WAIT: Duration = Duration::from_secs(60);
/// Lines printed past a screenful: the default history's line limit, so
/// each pane's history is full by lines or, for full-width lines, by bytes.
const PAST_SCREEN: usize = 10_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let room = &args[1];
    let n: usize = args[2].parse().expect("N");
    let (cols, rows) = args[3].split_once('x').expect("COLSxROWS");
    let (cols, rows): (u16, u16) = (cols.parse().expect("COLS"), rows.parse().expect("ROWS"));
    let lines = rows as usize + PAST_SCREEN;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let engine = Engine::connect().await.expect("engine");
        let link = RoomLink::connect(&engine, room).await.expect("link");
        for i in 0..n {
            // Full-width lines past screen and history, then a marker, then idle.
            let script = format!(
                "yes \"$(printf '%0{}d' {i})\" | head -n {lines}; echo pane-{i}-ready; exec sleep 86400",
                cols - 1
            );
            let open = PaneRequest {
                name: format!("bench-{cols}x{rows}-{i}"),
                argv: Some(vec!["sh".into(), "-c".into(), script]),
                rows,
                cols,
                ..Default::default()
            };
            match link.link().request(Request::OpenPane(open)).await.expect("open pane") {
                Response::PaneOpened { .. } => {}
                other => panic!("opening pane {i}: {other:?}"),
            }
        }
        let deadline = Instant::now() + SCREEN_WAIT;
        for i in 0..n {
            let marker = format!("pane-{i}-ready");
            loop {
                assert!(Instant::now() < deadline, "pane {i} did not show its screenful within {SCREEN_WAIT:?}");
                let handle = link
                    .link()
                    .open(Request::Attach {
                        pane: format!("bench-{cols}x{rows}-{i}"),
                        rows: 0,
                        cols: 0,
                        history: false,
                        typist: None,
                    })
                    .await
                    .expect("attach");
                assert_eq!(handle.recv_reply().await.expect("reply"), Response::Ready);
                // The first Data is the repaint of the current screen.
                let screen = match handle.recv().await {
                    Some(Event::Data(b)) => b,
                    other => panic!("pane {i}: {other:?}"),
                };
                handle.send_eof().await.expect("detach");
                if String::from_utf8_lossy(&screen).contains(&marker) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    println!("{n} panes open");
}
