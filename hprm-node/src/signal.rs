//! SIGINT/SIGTERM for federate processes: the first asks the federation
//! to stop at a common tag (so shutdown reactions run everywhere); the
//! second exits at once.
//!
//! The signals are blocked in every thread and taken by one thread with
//! `sigwait`, so no code runs in signal-handler context. The mask must be
//! set before any other thread starts (threads inherit it), which is why
//! `run_federate` calls this first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::NodeError;

/// Set once this process's federate runs its event loop, which is what
/// reads stop requests. Before that (joining, waiting for the others to
/// join, agreeing the start) nothing has run and nothing would read one.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// A launcher took SIGINT/SIGTERM: the program is stopping, so a federate
/// that fails now is not restarted.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Whether this launcher was told to stop (see [`forward_to_children`]).
pub(crate) fn stop_requested() -> bool {
    STOPPING.load(std::sync::atomic::Ordering::SeqCst)
}

/// Called by `run_federate` when the scheduler starts.
pub(crate) fn mark_running() {
    RUNNING.store(true, Ordering::SeqCst);
}
use crate::inbox::{Inbox, Incoming};

/// Blocks SIGINT and SIGTERM and forwards them to `inbox`.
pub(crate) fn forward_to(inbox: Arc<Inbox>) -> Result<(), NodeError> {
    let set = block()?;
    std::thread::Builder::new()
        .name("hprm-signals".into())
        .spawn(move || {
            let mut seen = 0;
            while let Some(sig) = wait(&set) {
                if !RUNNING.load(Ordering::SeqCst) {
                    // Nothing ran yet: there is nothing to shut down, and a
                    // federate still waiting for the federation would not hear it.
                    tracing::warn!(signal = sig, "stopped before the program started");
                    std::process::exit(0);
                }
                seen += 1;
                if seen > 1 {
                    tracing::warn!("second signal: exiting now");
                    std::process::exit(130);
                }
                tracing::info!(signal = sig, "stopping at the next common tag (signal again to exit at once)");
                inbox.push(Incoming::Signal);
            }
        })
        .map_err(|e| NodeError::io("starting the signal thread", e))?;
    Ok(())
}

/// The processes of one launch.
pub(crate) type Pids = Arc<std::sync::Mutex<Vec<u32>>>;

/// For a launcher: blocks SIGINT and SIGTERM and passes each on to the
/// federate processes as SIGTERM (they run in their own process groups,
/// see [`detach`], so a terminal's Ctrl-C reaches only the launcher and
/// each federate hears of it exactly once per press).
pub(crate) fn forward_to_children(pids: Pids) -> Result<(), NodeError> {
    // One forwarding thread per process, whatever the number of launches:
    // each launch hands it its children.
    static CHILDREN: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<Pids>>>> = std::sync::OnceLock::new();
    let mut started = false;
    let all = CHILDREN.get_or_init(|| {
        started = true;
        Arc::new(std::sync::Mutex::new(Vec::new()))
    });
    {
        let mut launches = all.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Launches whose children all ended hold no one to tell.
        launches.retain(|l| Arc::strong_count(l) > 1);
        launches.push(pids);
    }
    if !started {
        return Ok(());
    }
    let all = all.clone();
    let set = block()?;
    std::thread::Builder::new()
        .name("hprm-launch-signals".into())
        .spawn(move || {
            while let Some(sig) = wait(&set) {
                tracing::info!(signal = sig, "stopping the program");
                STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
                let launches = all.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                for pids in launches.iter().filter(|l| Arc::strong_count(l) > 1) {
                    for &pid in pids.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
                        if let Ok(pid) = i32::try_from(pid) {
                            // SAFETY: kill(2) with a pid a running launch spawned.
                            unsafe { libc::kill(pid, libc::SIGTERM) };
                        }
                    }
                }
            }
        })
        .map_err(|e| NodeError::io("starting the signal thread", e))?;
    Ok(())
}

/// Makes a child run in its own process group with SIGINT and SIGTERM
/// unblocked (the mask is inherited across exec).
pub(crate) fn detach(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
}

fn wait(set: &libc::sigset_t) -> Option<libc::c_int> {
    let mut sig: libc::c_int = 0;
    // SAFETY: `set` is a valid, initialised sigset_t.
    (unsafe { libc::sigwait(set, &mut sig) } == 0).then_some(sig)
}

fn block() -> Result<libc::sigset_t, NodeError> {
    // SAFETY: plain libc calls on a sigset_t owned by this frame.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(NodeError::io("blocking SIGINT/SIGTERM", std::io::Error::from_raw_os_error(rc)));
        }
        set
    };
    Ok(set)
}
