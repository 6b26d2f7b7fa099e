//! The first frame of every connection: the daemon's Hello, with the arena's
//! file descriptor, the client's outbox's (`crate::outbox`) and the spill
//! file's (`crate::spill`) attached
//! (SCM_RIGHTS) to its first byte.
//!
//! The descriptors are passed exactly once per connection; a client maps
//! them once and keeps the mappings for the connection's lifetime.

use std::io::{self, IoSlice, IoSliceMut, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

use super::frame::{parse_header, FrameError, HEADER_LEN, MAX_REPLY_BODY};
use super::message::{decode_reply, DecodeError, Hello, Reply};

/// The handshake did not complete.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("reading the daemon's greeting failed: {0}")]
    Io(#[from] io::Error),
    #[error("the daemon's greeting has a bad header: {0}")]
    Frame(#[from] FrameError),
    #[error("the daemon's greeting is not valid: {0}")]
    Decode(#[from] DecodeError),
    #[error("the daemon refused this client: {0}")]
    Refused(String),
    #[error("the peer's first frame is not a greeting; is this socket an hprm-store daemon?")]
    NotHello,
    #[error("the daemon's greeting carried no arena descriptor; is this socket an hprm-store daemon?")]
    NoDescriptor,
    #[error("the peer's greeting carried more descriptors than a daemon sends (at most {MAX_HELLO_FDS}), or control data a daemon never sends; is this socket an hprm-store daemon of this version?")]
    TooManyDescriptors,
}

/// Descriptors a Hello carries at most: the arena's, the outbox's, the
/// spill file's.
pub const MAX_HELLO_FDS: usize = 3;

/// Descriptors one message can carry at most (Linux's `SCM_MAX_FD`).
const SCM_MAX_FD: usize = 253;

/// Sends as much of the encoded Hello `frame` as the socket takes, with
/// `arena` (and `outbox`, then `spill`, if any) attached. Returns the bytes sent; the
/// caller sends the rest as plain data (the descriptors ride with the
/// first byte only).
pub fn send_hello(
    sock: BorrowedFd<'_>,
    frame: &[u8],
    arena: BorrowedFd<'_>,
    outbox: Option<BorrowedFd<'_>>,
    spill: Option<BorrowedFd<'_>>,
) -> io::Result<usize> {
    let fds: Vec<RawFd> = std::iter::once(arena).chain(outbox).chain(spill).map(|fd| fd.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let sent = sendmsg::<()>(sock.as_raw_fd(), &[IoSlice::new(frame)], &cmsg, MsgFlags::MSG_NOSIGNAL, None)?;
    Ok(sent)
}

/// What came with the Hello.
pub struct Greeting {
    pub hello: Hello,
    pub arena: OwnedFd,
    /// The client's outbox, when the daemon made one (`Hello::outbox_size`).
    pub outbox: Option<OwnedFd>,
    /// The spill file, when the daemon has one (`Hello::spill_size`).
    pub spill: Option<OwnedFd>,
}

/// Reads the Hello frame from a blocking socket and takes the descriptors.
pub fn recv_hello(sock: &UnixStream) -> Result<Greeting, HandshakeError> {
    let mut header = [0u8; HEADER_LEN];
    // Room for as many descriptors as one message can carry on Linux
    // (SCM_MAX_FD, 253: about 1 KiB), not just the 3 a daemon sends: when
    // the buffer is too small the kernel installs what fits and flags
    // MSG_CTRUNC, and nix then refuses to walk the control messages, so the
    // installed descriptors could not be closed and leaked into the client
    // (tests/handshake.rs: 4 of 5). Every one received in a message not
    // flagged MSG_CTRUNC is owned here, and those past the Hello's own are
    // closed with `fds`. A truncated message is refused without walking
    // its control messages, so what the kernel did install then would
    // leak; that cannot happen on this socket: the buffer holds the most
    // SCM_RIGHTS descriptors the kernel passes in one message (it merges
    // a sender's several SCM_RIGHTS into one list of at most SCM_MAX_FD),
    // and the only other control messages a Unix socket delivers
    // (credentials, security label, pidfd) come only when the receiver
    // asks for them (SO_PASSCRED, SO_PASSSEC, SO_PASSPIDFD), which this
    // socket never does.
    let mut cmsg_buf = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
    let (got, mut fds) = {
        let mut iov = [IoSliceMut::new(&mut header)];
        let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg_buf), MsgFlags::MSG_CMSG_CLOEXEC)
            .map_err(io::Error::from)?;
        if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
            // Unreachable on this socket (see the buffer's comment above);
            // refused rather than trusted should that ever change.
            return Err(HandshakeError::TooManyDescriptors);
        }
        let mut fds = Vec::new();
        for cmsg in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(raws) = cmsg {
                for raw in raws {
                    // SAFETY: the kernel just installed `raw` in our table for
                    // us; nothing else owns it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        }
        if fds.len() > MAX_HELLO_FDS {
            // Closed as `fds` drops.
            return Err(HandshakeError::TooManyDescriptors);
        }
        (msg.bytes, fds.into_iter())
    };
    if got == 0 {
        return Err(
            io::Error::new(io::ErrorKind::UnexpectedEof, "the daemon closed the connection before greeting").into()
        );
    }
    let mut reader = sock;
    reader.read_exact(&mut header[got..])?;
    let body_len = parse_header(&header, MAX_REPLY_BODY)?;
    let mut body = vec![0u8; body_len];
    reader.read_exact(&mut body)?;
    let (_, reply) = decode_reply(&body)?;
    let hello = match reply {
        Reply::Hello(hello) => hello,
        Reply::Error(e) => return Err(HandshakeError::Refused(e.message)),
        _ => return Err(HandshakeError::NotHello),
    };
    let arena = fds.next().ok_or(HandshakeError::NoDescriptor)?;
    let outbox = if hello.outbox_size > 0 { Some(fds.next().ok_or(HandshakeError::NoDescriptor)?) } else { None };
    let spill = if hello.spill_size > 0 { Some(fds.next().ok_or(HandshakeError::NoDescriptor)?) } else { None };
    Ok(Greeting { hello, arena, outbox, spill })
}
