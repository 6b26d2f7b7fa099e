//! The first frame of every connection: the daemon's Hello, with the arena's
//! file descriptor attached (SCM_RIGHTS) to its first byte.
//!
//! The descriptor is passed exactly once per connection; a client maps it
//! once and keeps the mapping for the connection's lifetime.

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
    #[error("the peer's first frame is not a greeting; is this socket an hprm-store daemon?")]
    NotHello,
    #[error("the daemon's greeting carried no arena descriptor; is this socket an hprm-store daemon?")]
    NoDescriptor,
}

/// Sends as much of the encoded Hello `frame` as the socket takes, with
/// `arena` attached. Returns the bytes sent; the caller sends the rest as
/// plain data (the descriptor rides with the first byte only).
pub fn send_hello(sock: BorrowedFd<'_>, frame: &[u8], arena: BorrowedFd<'_>) -> io::Result<usize> {
    let fds = [arena.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let sent = sendmsg::<()>(sock.as_raw_fd(), &[IoSlice::new(frame)], &cmsg, MsgFlags::MSG_NOSIGNAL, None)?;
    Ok(sent)
}

/// Reads the Hello frame from a blocking socket and takes the descriptor.
pub fn recv_hello(sock: &UnixStream) -> Result<(Hello, OwnedFd), HandshakeError> {
    let mut header = [0u8; HEADER_LEN];
    let mut cmsg_buf = nix::cmsg_space!([RawFd; 1]);
    let (got, fd) = {
        let mut iov = [IoSliceMut::new(&mut header)];
        let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg_buf), MsgFlags::MSG_CMSG_CLOEXEC).map_err(io::Error::from)?;
        let mut fd = None;
        for cmsg in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(fds) = cmsg {
                for raw in fds {
                    // SAFETY: the kernel just installed `raw` in our table for
                    // us; nothing else owns it. Extra descriptors are closed.
                    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                    if fd.is_none() {
                        fd = Some(owned);
                    }
                }
            }
        }
        (msg.bytes, fd)
    };
    if got == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the daemon closed the connection before greeting").into());
    }
    let mut reader = sock;
    reader.read_exact(&mut header[got..])?;
    let body_len = parse_header(&header, MAX_REPLY_BODY)?;
    let mut body = vec![0u8; body_len];
    reader.read_exact(&mut body)?;
    let (_, reply) = decode_reply(&body)?;
    let Reply::Hello(hello) = reply else { return Err(HandshakeError::NotHello) };
    let fd = fd.ok_or(HandshakeError::NoDescriptor)?;
    Ok((hello, fd))
}
