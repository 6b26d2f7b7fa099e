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
//! `run_federate` or a launch returns. A launched federate's process is the
//! exception: it keeps the handler, dropping signals, until it exits (see
//! [`Listening`]'s drop).
//!
//! System calls go through `nix`, as in the rest of the workspace, except
//! in [`on_signal`] itself: a signal handler must stay minimal and
//! async-signal-safe, so it calls `libc::write` and saves errno by hand,
//! with nothing in between that could allocate or lock.

use std::os::fd::{IntoRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::signal::{kill, sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::unistd::Pid;

use crate::error::NodeError;
use crate::inbox::{Inbox, Incoming};
use crate::sync::Mutex;

/// The signals this module handles.
const SIGNALS: [Signal; 2] = [Signal::SIGINT, Signal::SIGTERM];

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
    replaced: Option<[SigAction; SIGNALS.len()]>,
    /// When the federate heard its first signal.
    first: Option<Instant>,
}

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
        // A federate a signal stopped keeps the handler (which now drops
        // signals: nobody listens) until its process exits: the launcher
        // passes the same stop request on, and its copy may come after the
        // federate finished; with the old disposition back it would kill
        // the process on its way out, and the launcher would report the
        // federate as failed (signal 15).
        //
        // A launched federate (its process exists to run this federate: the
        // launcher set `HPRM_FEDERATE`) keeps it too, however it ended: a
        // launcher that saw another federate fail sends SIGTERM at any
        // moment, and one landing between this drop and the process's exit
        // would replace the federate's own status (a clean 0, or its error
        // line and exit 1) with "killed by signal 15". Only a process that
        // goes on after the federate (an interactive Python session, an
        // application embedding one) needs its old dispositions back.
        let keep = matches!(self.0, Role::Federate) && (l.first.is_some() || launched_federate());
        if l.federate.is_none() && l.launches.is_empty() && !keep {
            if let Some(replaced) = l.replaced.take() {
                for (sig, old) in SIGNALS.iter().zip(replaced.iter()) {
                    // SAFETY: restores a disposition sigaction(2) reported.
                    let _ = unsafe { sigaction(*sig, old) };
                }
            }
        }
    }
}

/// Whether this process was started by a launcher to run one federate
/// (the launcher names the federate in `HPRM_FEDERATE`; `launch` reads it
/// back as the federate's options).
fn launched_federate() -> bool {
    std::env::var_os("HPRM_FEDERATE").is_some()
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
    let (read, write) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| NodeError::io("creating the signal pipe", e.into()))?;
    // The write end is non-blocking: a handler must never block, and a
    // full pipe already holds more signals than anyone acts on.
    let _ = fcntl(std::os::fd::AsRawFd::as_raw_fd(&write), FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
    let read_fd = std::os::fd::AsRawFd::as_raw_fd(&read);
    match READ.set(read_fd) {
        Ok(()) => {
            // Both ends stay open for the process's life.
            let _ = read.into_raw_fd();
            WRITE_FD.store(write.into_raw_fd(), Ordering::SeqCst);
            Ok(read_fd)
        }
        // Another thread made the pipe first: use that one (dropping the
        // ends made above closes them).
        Err(_) => READ
            .get()
            .copied()
            .ok_or_else(|| NodeError::io("creating the signal pipe", std::io::Error::other("no pipe"))),
    }
}

/// The handler. Only async-signal-safe calls: an atomic load and write(2);
/// errno is saved and restored, since the interrupted thread may be about
/// to read it. It calls `libc` directly, not `nix`, on purpose: nothing
/// but these calls may run in signal context (see the module docs).
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
fn install() -> Result<[SigAction; SIGNALS.len()], NodeError> {
    // SA_RESTART so that the threads it interrupts resume their system calls.
    let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::SA_RESTART, SigSet::empty());
    let err = |e: Errno| NodeError::io("installing the SIGINT/SIGTERM handler", e.into());
    // SAFETY: the handler only makes async-signal-safe calls (see it).
    let replaced =
        unsafe { [sigaction(SIGNALS[0], &action).map_err(err)?, sigaction(SIGNALS[1], &action).map_err(err)?] };
    // A thread of the process may have blocked them (the old scheme
    // of this module, an embedding application): this one takes them.
    let _ = signal_set().thread_unblock();
    Ok(replaced)
}

/// [`SIGNALS`] as a set.
fn signal_set() -> SigSet {
    let mut set = SigSet::empty();
    for sig in SIGNALS {
        set.add(sig);
    }
    set
}

/// Starts the thread that reads the pipe (once per process).
fn dispatcher(read: RawFd) -> Result<(), NodeError> {
    static STARTED: OnceLock<()> = OnceLock::new();
    let mut result = Ok(());
    STARTED.get_or_init(|| {
        result = std::thread::Builder::new()
            .name("hprm-signals".into())
            .spawn(move || loop {
                let mut byte = [0u8];
                match nix::unistd::read(read, &mut byte) {
                    Ok(1) => act(i32::from(byte[0])),
                    Err(Errno::EINTR) => {}
                    _ => return,
                }
            })
            .map(|_| ())
            .map_err(|e| NodeError::io("starting the signal thread", e));
    });
    result
}

/// What a signal means to whoever listens now.
fn act(sig: i32) {
    let mut l = listeners().lock();
    if !l.launches.is_empty() {
        tracing::info!(signal = sig, "stopping the program");
        STOPPING.store(true, Ordering::SeqCst);
        for pids in &l.launches {
            for &pid in pids.lock().iter() {
                if let Ok(pid) = i32::try_from(pid) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
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

/// Makes a launcher's child (a federate or a daemon) run in its own process
/// group with SIGINT and SIGTERM unblocked (the mask is inherited across
/// exec), and get SIGTERM when the launcher dies, however it dies: a
/// launcher killed with SIGKILL (or crashed) leaves no federate, store or
/// RTI running without it.
///
/// The parent-death signal follows the thread that spawned the child; a
/// launch spawns every child from the thread that runs it, which lives as
/// long as the launch.
pub(crate) fn detach(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let launcher = std::process::id();
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // sigemptyset, sigaddset and pthread_sigmask: all async-signal-safe.
            let _ = signal_set().thread_unblock();
            // prctl and getppid are system calls. The launcher may have died
            // between fork and prctl, before the signal was armed: then the
            // child is another process's already, and must not run.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 || libc::getppid() as u32 != launcher {
                return Err(std::io::Error::other("the launcher exited while starting this process"));
            }
            Ok(())
        });
    }
}
