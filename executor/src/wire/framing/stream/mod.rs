//! `QuietStream`: a Unix stream or a pair of pipes read and written directly, and the
//! descriptors a connection lends to the execution waiting awake (`lend`).

pub(crate) mod lend;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

/// A Unix stream or a pair of pipes read and written directly, without the wakes Tokio's
/// own types cost here.
///
/// Tokio watches a Unix stream for reading and for writing at once, and Linux signals a
/// Unix stream writable each time its peer reads (the bytes read were charged to the
/// writer's socket): a thread woken for nothing for every frame the other side reads,
/// several microseconds each and sometimes in the way of the thread with work. This one
/// watches for room only while a write waits for it. Tokio's stdin and stdout read and
/// write on a blocking thread, two thread hand-offs per read or write; this one reads and
/// writes the descriptors, made non-blocking, from the task (or thread) at hand.
pub(crate) struct QuietStream {
    /// The runtime it was made in, which watches it (a write may come from another).
    runtime: tokio::runtime::Handle,
    /// Watched for reading only.
    input: Option<tokio::io::unix::AsyncFd<std::fs::File>>,
    /// Written directly.
    output: Option<std::fs::File>,
    /// `output` watched for room, only while writes find none; dropped before `output`.
    room: Option<tokio::io::unix::AsyncFd<Descriptor>>,
    /// Whether `output` is a socket (shut down for writing at the end; a pipe just closes).
    socket: bool,
    /// Written with `send(MSG_NOSIGNAL)`, so a peer gone is an error and not a `SIGPIPE`
    /// for a host that does not ignore it: a connection's socket. Stdio is written with
    /// `write`, the call a confined worker's allowlist has for it.
    send: bool,
    /// Status flags to put back on descriptors this process shares (stdin, stdout).
    restore: Vec<(std::fs::File, libc::c_int)>,
}

impl QuietStream {
    /// A Unix stream, both ways.
    pub(crate) fn unix(stream: tokio::net::UnixStream) -> std::io::Result<QuietStream> {
        let input = std::fs::File::from(std::os::fd::OwnedFd::from(stream.into_std()?));
        let output = input.try_clone()?;
        Ok(QuietStream {
            runtime: tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?,
            input: Some(watched(input, tokio::io::Interest::READABLE)?),
            output: Some(output),
            room: None,
            socket: true,
            send: true,
            restore: Vec::new(),
        })
    }

    /// This reading stream as an input that an execution waiting awake for its answer
    /// reads too ([`lend`]); a frame past `max_frame_bytes` is the reader's, to refuse.
    pub(crate) fn lend(
        mut self,
        max_frame_bytes: usize,
    ) -> std::io::Result<(Arc<lend::Input>, lend::Reader)> {
        let file = self.input.take().ok_or_else(not_this_way)?.into_inner();
        lend::Input::new(file, max_frame_bytes, Some(self))
    }

    /// This process's stdin lent and its stdout, when both are pipes or sockets
    /// ([`QuietStream::stdio`]); `Err` if the lent input cannot be watched.
    pub(crate) fn lend_stdio(max_frame_bytes: usize) -> Option<std::io::Result<Lent>> {
        let (reading, writing) = QuietStream::stdio()?;
        Some(reading.lend(max_frame_bytes).map(|(input, reader)| (input, reader, writing)))
    }

    /// A connected socket (Unix or TCP, non-blocking) as a lent input ([`lend`]) and the
    /// stream writing to it: the socket's descriptor writes, a copy of it is read. The
    /// socket comes back with the error when the copy cannot be made (out of descriptors).
    pub(crate) fn lend_socket(
        socket: std::os::fd::OwnedFd,
        max_frame_bytes: usize,
    ) -> Result<Lent, (std::io::Error, std::os::fd::OwnedFd)> {
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime,
            Err(e) => return Err((std::io::Error::other(e), socket)),
        };
        let input = match socket.try_clone() {
            Ok(input) => std::fs::File::from(input),
            Err(e) => return Err((e, socket)),
        };
        match lend::Input::new(input, max_frame_bytes, None) {
            Ok((input, reader)) => {
                let output = Some(std::fs::File::from(socket));
                let writing = QuietStream {
                    runtime,
                    input: None,
                    output,
                    room: None,
                    socket: true,
                    send: true,
                    restore: Vec::new(),
                };
                Ok((input, reader, writing))
            }
            Err(e) => Err((e, socket)),
        }
    }

    /// This process's stdin and stdout, when both are pipes or sockets (a terminal or a
    /// file is shared with others and left as it is: `None`). Their flags are put back
    /// when the streams are dropped.
    pub(crate) fn stdio() -> Option<(QuietStream, QuietStream)> {
        use std::os::fd::AsFd;
        fn streamable(fd: std::os::fd::BorrowedFd<'_>) -> Option<(std::fs::File, bool)> {
            let copy = std::fs::File::from(fd.try_clone_to_owned().ok()?);
            let kind = copy.metadata().ok()?.file_type();
            use std::os::unix::fs::FileTypeExt;
            (kind.is_fifo() || kind.is_socket()).then_some((copy, kind.is_socket()))
        }
        /// `file` made non-blocking, and what puts its flags back.
        fn non_blocking(file: &std::fs::File) -> Option<(std::fs::File, libc::c_int)> {
            use std::os::fd::AsRawFd;
            let copy = file.try_clone().ok()?;
            // SAFETY: fcntl on a descriptor owned here, no pointers.
            let flags = unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_GETFL) };
            if flags < 0 {
                return None;
            }
            // SAFETY: as above.
            let set = unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) };
            if set < 0 {
                return None;
            }
            Some((copy, flags))
        }
        let (input, _) = streamable(std::io::stdin().as_fd())?;
        let (output, socket) = streamable(std::io::stdout().as_fd())?;
        // Each made non-blocking is put back when its stream drops, an early return's too.
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let mut reading = QuietStream {
            runtime: runtime.clone(),
            input: None,
            output: None,
            room: None,
            socket: false,
            send: false,
            restore: vec![non_blocking(&input)?],
        };
        let restore = vec![non_blocking(&output)?];
        let writing = QuietStream {
            runtime,
            input: None,
            output: Some(output),
            room: None,
            socket,
            send: false,
            restore,
        };
        reading.input = Some(watched(input, tokio::io::Interest::READABLE).ok()?);
        Some((reading, writing))
    }
}

impl Drop for QuietStream {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // No longer watched before its descriptor closes (fields drop after this).
        self.room = None;
        for (file, flags) in &self.restore {
            // SAFETY: fcntl on a descriptor owned here, no pointers.
            unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, *flags) };
        }
    }
}

/// `file` registered with the current runtime for `interest` only.
fn watched(
    file: std::fs::File,
    interest: tokio::io::Interest,
) -> std::io::Result<tokio::io::unix::AsyncFd<std::fs::File>> {
    // SAFETY: a `File` owns its descriptor: it stays open, the same, and reports the
    // same number until it is dropped with the `AsyncFd`.
    Ok(unsafe { tokio::io::unix::AsyncFd::register_with_interest(file, interest) }?)
}

/// A connection whose input is lent ([`QuietStream::lend_socket`],
/// [`QuietStream::lend_stdio`]): the input, the connection's reader of it, and the stream
/// writing the other way.
pub(crate) type Lent = (Arc<lend::Input>, lend::Reader, QuietStream);

/// A descriptor owned elsewhere (a stream's output, a lent input's file), as the runtime
/// watches it: its owner keeps it open while it is watched.
pub(super) struct Descriptor(pub(super) std::os::fd::RawFd);

impl std::os::fd::AsRawFd for Descriptor {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

fn not_this_way() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Unsupported, "this stream goes the other way")
}

impl tokio::io::AsyncRead for QuietStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        use std::io::Read;
        let Some(input) = &self.input else { return Poll::Ready(Err(not_this_way())) };
        loop {
            let mut ready = std::task::ready!(input.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let wanted = unfilled.len();
            match ready.try_io(|file| file.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    // A short read emptied it: the next read waits for more without first
                    // trying (as Tokio's own streams do).
                    if n > 0 && n < wanted {
                        ready.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for QuietStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        use std::io::Write;
        let this = self.get_mut();
        let Some(output) = &this.output else { return Poll::Ready(Err(not_this_way())) };
        loop {
            let written = if this.send {
                use std::os::fd::AsRawFd;
                // SAFETY: `buf` is valid for its length; the descriptor is this stream's own.
                let n = unsafe {
                    libc::send(output.as_raw_fd(), buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL)
                };
                usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
            } else {
                (&*output).write(buf)
            };
            match written {
                Ok(n) => {
                    if n == buf.len() {
                        this.room = None;
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
            let room = match &mut this.room {
                Some(room) => room,
                None => {
                    use std::os::fd::AsRawFd;
                    let _runtime = this.runtime.enter();
                    let output = Descriptor(output.as_raw_fd());
                    // SAFETY: `output` is this stream's own, open until the stream is
                    // dropped, and `room` is dropped first (`Drop`), so the number is this
                    // descriptor's for as long as the runtime watches it.
                    let room = unsafe {
                        tokio::io::unix::AsyncFd::register_with_interest(
                            output,
                            tokio::io::Interest::WRITABLE,
                        )
                    }?;
                    this.room.insert(room)
                }
            };
            // Cleared before the next try, so room made after it is not missed.
            std::task::ready!(room.poll_write_ready(cx))?.clear_ready();
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        use std::os::fd::AsRawFd;
        if let (Some(output), true) = (&self.output, self.socket) {
            // SAFETY: shutdown on a descriptor owned here, no pointers.
            if unsafe { libc::shutdown(output.as_raw_fd(), libc::SHUT_WR) } < 0 {
                return Poll::Ready(Err(std::io::Error::last_os_error()));
            }
        }
        Poll::Ready(Ok(()))
    }
}
