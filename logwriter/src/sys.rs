//! The calls std does not offer: a message with one descriptor passed
//! (SCM_RIGHTS) both ways, and poll(2).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Room for one control message carrying one descriptor, aligned as the
/// kernel's `cmsghdr` wants.
struct ControlBuf([u64; 4]);

fn fd_space() -> usize {
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) as usize }
}

/// Sends `data` in one message on socket `sock`, with descriptor `fd` if any.
pub fn send_with_fd(sock: RawFd, data: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    let mut control = ControlBuf([0; 4]);
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = fd_space();
        // SAFETY: the control buffer holds one cmsghdr with room for one descriptor (fd_space).
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        }
    }
    loop {
        // SAFETY: msg points at live buffers for the call's duration.
        if unsafe { libc::sendmsg(sock, &msg, 0) } >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message on socket `sock` into `buf`: its length, and the
/// first descriptor it carried (any others are closed), close-on-exec.
pub fn recv_with_fd(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = ControlBuf([0; 4]);
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<ControlBuf>();
    let n = loop {
        // SAFETY: msg points at live buffers for the call's duration.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut first = None;
    // SAFETY: the kernel filled the control buffer; the CMSG macros walk it within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..bytes / size_of::<RawFd>() {
                    // the kernel installed these descriptors for us: owned from here
                    let owned = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    first.get_or_insert(owned);
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n, first))
}

/// Waits until one of `fds` has an event (no timeout); an interrupted wait
/// returns with no event.
pub fn poll(fds: &mut [libc::pollfd]) -> io::Result<()> {
    // SAFETY: fds is a live slice of pollfd of the given length.
    if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) } >= 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::Interrupted { Ok(()) } else { Err(e) }
}

/// A `pollfd` asking for `events` on `fd`.
pub fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd { fd, events, revents: 0 }
}
