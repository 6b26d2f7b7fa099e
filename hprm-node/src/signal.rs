//! SIGINT/SIGTERM for federates and launchers.
//!
//! In a federate the first signal asks the federation to stop at a common
//! tag (so shutdown reactions run everywhere) and a second one exits at
//! once; a launcher passes each signal on to its federates.
//!
//! # Why a handler, not a signal mask
//!
//! A process-directed signal goes to any one thread that does not block
//! it. Blocking SIGINT/SIGTERM and taking them with `sigwait` works only
//! if every thread blocks them, and a mask is inherited only by threads
//! started after it is set. A Python federate has threads before the
//! runtime runs: `import numpy` starts OpenBLAS's, and torch and
//! onnxruntime start theirs. The kernel picked one of those, the default
//! disposition applied, and the federate died of its SIGTERM without its
//! shutdown reactions.
//!
//! A disposition, unlike a mask, belongs to the process: whichever thread
//! the kernel picks runs [`on_signal`]. The handler does one
//! async-signal-safe thing, writing the signal's number into a pipe, and
//! one thread of ours (`hprm-signals`) reads the pipe and acts outside
//! signal context.
//!
//! # Lifetime
//!
//! The handler is installed while someone listens ([`Listening`] guards:
//! a running federate, a running launch) and the dispositions it replaced
//! are restored when the last guard drops. A Python process therefore
//! gets its own SIGINT handling (`KeyboardInterrupt`) back once
//! `run_federate` or a launch returns.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::error::NodeError;
use crate::inbox::{Inbox, Incoming};
use crate::sync::Mutex;

/// The signals this module handles.
const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// A signal that follows the first by less than this is the same request
/// reaching the federate twice, not a second request: under systemd's
/// default `KillMode=control-group` (or `kill -TERM 0`) a launched federate
/// receives SIGTERM itself and again from its launcher, which forwards it
/// within a few milliseconds. People press Ctrl-C twice further apart.
const SAME_REQUEST: Duration = Duration::from_millis(250);

/// Set once this process's federate runs its event loop, which is what
/// reads stop requests. Before that (joining, waiting for the others to
/// join, agreeing the start) nothing has run and nothing would read one.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// A launcher took SIGINT/SIGTERM: the program is stopping, so a federate
/// that fails now is not restarted.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// The pipe's write end, for the handler; -1 before the pipe exists.
static WRITE_FD: AtomicI32 = AtomicI32::new(-1);

/// Whether this launcher was told to stop (see [`forward_to_children`]).
pub(crate) fn stop_requested() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Called by `run_federate` when the scheduler starts.
pub(crate) fn mark_running() {
    RUNNING.store(true, Ordering::SeqCst);
}

/// The processes of one launch.
pub(crate) type Pids = Arc<Mutex<Vec<u32>>>;

/// Who hears the signals now.
#[derive(Default)]
struct Listeners {
    /// The running federate's inbox (at most one federate per process
    /// handles signals).
    federate: Option<Arc<Inbox>>,
    /// The running launches' children.
    launches: Vec<Pids>,
    /// The dispositions the handler replaced, while it is installed.
    replaced: Option<[libc::sigaction; SIGNALS.len()]>,
    /// When the federate heard its first signal.
    first: Option<Instant>,
}

// SAFETY: `libc::sigaction` is plain data (a function pointer, a mask and
// flags); it is only handed back to sigaction(2).
unsafe impl Send for Listeners {}

fn listeners() -> &'static Mutex<Listeners> {
    static L: OnceLock<Mutex<Listeners>> = OnceLock::new();
    L.get_or_init(|| Mutex::new(Listeners::default()))
}

/// Keeps the handler installed and its listener registered; dropping it
/// unregisters, and the last one restores the replaced dispositions.
#[must_use = "signals are handled only while the guard lives"]
pub(crate) struct Listening(Role);

enum Role {
    Federate,
    Launch(Pids),
}

impl Drop for Listening {
    fn drop(&mut self) {
        let mut l = listeners().lock();
        match &self.0 {
            Role::Federate => l.federate = None,
            Role::Launch(p) => l.launches.retain(|q| !Arc::ptr_eq(p, q)),
        }
        if l.federate.is_none() && l.launches.is_empty() {
            if let Some(replaced) = l.replaced.take() {
                for (sig, old) in SIGNALS.iter().zip(replaced.iter()) {
                    // SAFETY: restores a disposition sigaction(2) reported.
                    unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
                }
            }
        }
    }
}

/// A federate: SIGINT and SIGTERM stop it through `inbox` while the guard lives.
pub(crate) fn forward_to(inbox: Arc<Inbox>) -> Result<Listening, NodeError> {
    register(|l| {
        l.federate = Some(inbox);
        l.first = None;
    })?;
    Ok(Listening(Role::Federate))
}

/// A launcher: passes SIGINT and SIGTERM on to the launch's federate
/// processes as SIGTERM while the guard lives. They run in their own
/// process groups (see [`detach`]), so a terminal's Ctrl-C reaches only
/// the launcher and each federate hears of it once per press.
pub(crate) fn forward_to_children(pids: Pids) -> Result<Listening, NodeError> {
    let mine = pids.clone();
    register(move |l| l.launches.push(pids))?;
    Ok(Listening(Role::Launch(mine)))
}

fn register(add: impl FnOnce(&mut Listeners)) -> Result<(), NodeError> {
    let read = pipe()?;
    let mut l = listeners().lock();
    if l.replaced.is_none() {
        l.replaced = Some(install()?);
    }
    add(&mut l);
    drop(l);
    dispatcher(read)
}

/// The pipe between the handler and the dispatcher (made once per
/// process); returns its read end.
fn pipe() -> Result<RawFd, NodeError> {
    static READ: OnceLock<RawFd> = OnceLock::new();
    if let Some(&fd) = READ.get() {
        return Ok(fd);
    }
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2(2) fills the two descriptors of a valid array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(NodeError::io("creating the signal pipe", std::io::Error::last_os_error()));
    }
    // The write end is non-blocking: a handler must never block, and a
    // full pipe already holds more signals than anyone acts on.
    // SAFETY: fcntl(2) on a descriptor this function just made.
    unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
    match READ.set(fds[0]) {
        Ok(()) => {
            WRITE_FD.store(fds[1], Ordering::SeqCst);
            Ok(fds[0])
        }
        Err(_) => {
            // Another thread made the pipe first: use that one.
            // SAFETY: closes the descriptors made above, used by no one.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            READ.get().copied().ok_or_else(|| NodeError::io("creating the signal pipe", std::io::Error::other("no pipe")))
        }
    }
}

/// The handler. Only async-signal-safe calls: an atomic load and write(2);
/// errno is saved and restored, since the interrupted thread may be about
/// to read it.
extern "C" fn on_signal(sig: libc::c_int) {
    let fd = WRITE_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    // SAFETY: __errno_location returns this thread's errno; write(2) of one
    // byte from the stack to a descriptor that stays open for the process's
    // life.
    unsafe {
        let errno = *libc::__errno_location();
        let byte = sig as u8;
        libc::write(fd, std::ptr::addr_of!(byte).cast(), 1);
        *libc::__errno_location() = errno;
    }
}

/// Installs [`on_signal`] for [`SIGNALS`]; returns what it replaced.
fn install() -> Result<[libc::sigaction; SIGNALS.len()], NodeError> {
    // SAFETY: sigaction(2) with an initialised struct whose handler is an
    // `extern "C" fn(c_int)` (no SA_SIGINFO); SA_RESTART so that the
    // threads it interrupts resume their system calls.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        let mut replaced: [libc::sigaction; SIGNALS.len()] = std::mem::zeroed();
        for (i, sig) in SIGNALS.iter().enumerate() {
            if libc::sigaction(*sig, &action, &mut replaced[i]) != 0 {
                return Err(NodeError::io("installing the SIGINT/SIGTERM handler", std::io::Error::last_os_error()));
            }
        }
        // A thread of the process may have blocked them (the old scheme
        // of this module, an embedding application): this one takes them.
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in SIGNALS {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        Ok(replaced)
    }
}

/// Starts the thread that reads the pipe (once per process).
fn dispatcher(read: RawFd) -> Result<(), NodeError> {
    static STARTED: OnceLock<()> = OnceLock::new();
    let mut result = Ok(());
    STARTED.get_or_init(|| {
        result = std::thread::Builder::new()
            .name("hprm-signals".into())
            .spawn(move || loop {
                let mut byte = 0u8;
                // SAFETY: read(2) of one byte into a stack variable.
                match unsafe { libc::read(read, std::ptr::addr_of_mut!(byte).cast(), 1) } {
                    1 => act(libc::c_int::from(byte)),
                    0 => return,
                    _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
                    _ => return,
                }
            })
            .map(|_| ())
            .map_err(|e| NodeError::io("starting the signal thread", e));
    });
    result
}

/// What a signal means to whoever listens now.
fn act(sig: libc::c_int) {
    let mut l = listeners().lock();
    if !l.launches.is_empty() {
        tracing::info!(signal = sig, "stopping the program");
        STOPPING.store(true, Ordering::SeqCst);
        for pids in &l.launches {
            for &pid in pids.lock().iter() {
                if let Ok(pid) = i32::try_from(pid) {
                    // SAFETY: kill(2) with a pid a running launch spawned.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                }
            }
        }
        return;
    }
    let Some(inbox) = l.federate.clone() else {
        // Between the last guard's drop and the restored disposition:
        // nobody runs anything that a stop would reach.
        return;
    };
    if !RUNNING.load(Ordering::SeqCst) {
        // Nothing ran yet: there is nothing to shut down, and a federate
        // still waiting for the federation would not hear it.
        tracing::warn!(signal = sig, "stopped before the program started");
        std::process::exit(0);
    }
    match l.first {
        None => {
            l.first = Some(Instant::now());
            tracing::info!(signal = sig, "stopping at the next common tag (signal again to exit at once)");
            inbox.push(Incoming::Signal);
        }
        Some(first) if first.elapsed() < SAME_REQUEST => {
            tracing::debug!(signal = sig, "the same stop request again (a launcher forwarding it); already stopping");
        }
        Some(_) => {
            tracing::warn!("second signal: exiting now");
            std::process::exit(130);
        }
    }
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
