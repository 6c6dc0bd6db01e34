//! The `hca` tool as a child process on a RoCE address (and a TCP port) of its own. The tool
//! binds UDP 4791 on its `--roce` address itself, so the test cannot hold it for the tool: it
//! gives the tool fresh candidates (`netlease`) and runs it again with others when the tool
//! reports one taken ("cannot bind UDP A:4791: Address already in use (os error 98)", "Couldn't
//! listen to port P: Address already in use (os error 98)"). Every wait is bounded.
#![allow(dead_code)]

use netlease::{Attempt, Fresh, Listening};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The exit status (-1: a signal), stdout and stderr of one run.
pub type Output = (i32, String, String);

/// A child process of the tool, killed if the test ends without waiting for it.
pub struct Tool(pub Child);

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Tool {
    /// Starts the tool with `args`, its stdout and stderr piped.
    pub fn spawn<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Tool {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hca"));
        c.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        Tool(c.spawn().expect("spawn hca"))
    }

    /// Waits for the tool at most `limit`: its output, or `None` (killed at the limit).
    pub fn finish(mut self, limit: Duration) -> Option<Output> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                let (mut out, mut err) = (String::new(), String::new());
                self.0.stdout.take().map(|mut s| s.read_to_string(&mut out));
                self.0.stderr.take().map(|mut s| s.read_to_string(&mut err));
                return Some((status.code().unwrap_or(-1), out, err));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

/// A failed run that reports something it was told taken: try again with others.
fn taken_or_held(o: Output) -> Attempt<Output> {
    if o.0 != 0 && netlease::says_taken(&o.2) {
        Attempt::Taken(o.2.trim().to_string())
    } else {
        Attempt::Held(o)
    }
}

/// Runs the tool to its end (at most `limit`) with the arguments `args` makes of fresh
/// candidates, again with others while it reports one taken.
pub fn run_held(limit: Duration, mut args: impl FnMut(&mut Fresh) -> Vec<String>) -> Output {
    netlease::hold("the tool's RoCE address", |f| {
        let run = Tool::spawn(&args(f)).finish(limit);
        taken_or_held(run.unwrap_or_else(|| panic!("the tool did not end within {limit:?}")))
    })
}

/// Starts the tool as a server: `args` makes its arguments of fresh candidates, with the TCP
/// port it is told to listen on. Returns once the tool itself listens there (a client started
/// then cannot reach another run's server on that port), and the port; again with others while
/// it reports one taken.
pub fn serve_held(limit: Duration, mut args: impl FnMut(&mut Fresh) -> (Vec<String>, u16)) -> (Tool, u16) {
    netlease::hold("the tool's RoCE address and TCP port", |f| {
        let (a, port) = args(f);
        let mut tool = Tool::spawn(&a);
        match netlease::wait_listening(&mut tool.0, port, limit) {
            Listening::Yes => Attempt::Held((tool, port)),
            Listening::Exited(_) => {
                let o = tool.finish(limit).expect("an ended child");
                match taken_or_held(o) {
                    Attempt::Taken(why) => Attempt::Taken(why),
                    Attempt::Held((code, out, err)) => {
                        panic!("the server ended ({code}) before it listened:\n{out}{err}")
                    }
                }
            }
            Listening::TimedOut => panic!("the server did not listen on port {port} within {limit:?}"),
        }
    })
}

/// Starts the tool as a client of `listener` (the test is the server and holds it): `args` makes
/// its arguments of fresh candidates. Returns the tool and its connection once it connected;
/// again with others while it reports one taken (it then ends before it connects).
pub fn connect_held(
    listener: &TcpListener,
    limit: Duration,
    mut args: impl FnMut(&mut Fresh) -> Vec<String>,
) -> (Tool, TcpStream) {
    listener.set_nonblocking(true).expect("a non-blocking listener");
    let (tool, sock) = netlease::hold("the tool's RoCE address", |f| {
        let mut tool = Tool::spawn(&args(f));
        let deadline = Instant::now() + limit;
        loop {
            match listener.accept() {
                Ok((s, _)) => return Attempt::Held((tool, s)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("accept: {e}"),
            }
            if tool.0.try_wait().expect("try_wait").is_some() {
                let o = tool.finish(limit).expect("an ended child");
                return match taken_or_held(o) {
                    Attempt::Taken(why) => Attempt::Taken(why),
                    Attempt::Held((code, out, err)) => {
                        panic!("the tool ended ({code}) before it connected:\n{out}{err}")
                    }
                };
            }
            assert!(Instant::now() < deadline, "the tool never connected within {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    sock.set_nonblocking(false).expect("a blocking socket");
    (tool, sock)
}
