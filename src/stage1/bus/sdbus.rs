//! A narrow safe layer over libsystemd's sd-bus (`-lsystemd`): a bus on an
//! already-connected fd, method calls, message building and reading.
//!
//! sd-bus objects are not thread-safe: a `Bus` and its `Message`s are used by
//! one thread at a time (the pod's bus worker owns them).
//!
//! The 23 functions are declared here rather than taken from
//! `libsystemd-sys` (0.10, which declares them all): its declarations are
//! raw FFI too, so every block below that calls them would stay, for one
//! more build script (pkg-config, build-env) and an LGPL crate; both ways link
//! `-lsystemd` from libsystemd-dev. The symbols are versioned and stable:
//! 22 are LIBSYSTEMD_221, `sd_bus_flush_close_unref` LIBSYSTEMD_222.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::os::fd::{IntoRawFd, OwnedFd, RawFd};
use std::ptr;

#[repr(C)]
struct SdBus {
    _private: [u8; 0],
}

#[repr(C)]
struct SdBusMessage {
    _private: [u8; 0],
}

/// `sd_bus_error`: two C strings and a flag, freed with `sd_bus_error_free`.
#[repr(C)]
struct SdBusError {
    name: *const c_char,
    message: *const c_char,
    need_free: c_int,
}

#[link(name = "systemd")]
unsafe extern "C" {
    fn sd_bus_new(ret: *mut *mut SdBus) -> c_int;
    fn sd_bus_set_fd(bus: *mut SdBus, input_fd: c_int, output_fd: c_int) -> c_int;
    fn sd_bus_start(bus: *mut SdBus) -> c_int;
    fn sd_bus_flush_close_unref(bus: *mut SdBus) -> *mut SdBus;
    fn sd_bus_get_fd(bus: *mut SdBus) -> c_int;
    fn sd_bus_get_events(bus: *mut SdBus) -> c_int;
    fn sd_bus_process(bus: *mut SdBus, ret: *mut *mut SdBusMessage) -> c_int;
    fn sd_bus_call(
        bus: *mut SdBus,
        m: *mut SdBusMessage,
        usec: u64,
        error: *mut SdBusError,
        reply: *mut *mut SdBusMessage,
    ) -> c_int;
    fn sd_bus_error_free(e: *mut SdBusError);

    fn sd_bus_message_new_method_call(
        bus: *mut SdBus,
        m: *mut *mut SdBusMessage,
        destination: *const c_char,
        path: *const c_char,
        interface: *const c_char,
        member: *const c_char,
    ) -> c_int;
    fn sd_bus_message_unref(m: *mut SdBusMessage) -> *mut SdBusMessage;
    fn sd_bus_message_append_basic(m: *mut SdBusMessage, typ: c_char, p: *const c_void) -> c_int;
    fn sd_bus_message_open_container(m: *mut SdBusMessage, typ: c_char, contents: *const c_char) -> c_int;
    fn sd_bus_message_close_container(m: *mut SdBusMessage) -> c_int;
    fn sd_bus_message_read_basic(m: *mut SdBusMessage, typ: c_char, p: *mut c_void) -> c_int;
    fn sd_bus_message_enter_container(m: *mut SdBusMessage, typ: c_char, contents: *const c_char) -> c_int;
    fn sd_bus_message_exit_container(m: *mut SdBusMessage) -> c_int;
    fn sd_bus_message_skip(m: *mut SdBusMessage, types: *const c_char) -> c_int;
    fn sd_bus_message_get_type(m: *mut SdBusMessage, typ: *mut u8) -> c_int;
    fn sd_bus_message_get_interface(m: *mut SdBusMessage) -> *const c_char;
    fn sd_bus_message_get_member(m: *mut SdBusMessage) -> *const c_char;
    fn sd_bus_message_get_path(m: *mut SdBusMessage) -> *const c_char;
}

/// `SD_BUS_MESSAGE_SIGNAL`.
const MESSAGE_SIGNAL: u8 = 4;

/// A failed sd-bus operation: a local errno, or an error reply from the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdError {
    /// A negative errno from sd-bus, with the operation that returned it.
    Errno { op: &'static str, errno: i32 },
    /// An error reply: D-Bus error name and message.
    Reply { name: String, message: String },
}

impl std::fmt::Display for SdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SdError::Errno { op, errno } => write!(f, "{op}: {}", std::io::Error::from_raw_os_error(*errno)),
            SdError::Reply { name, message } => write!(f, "{name}: {message}"),
        }
    }
}

pub(crate) type SdResult<T> = Result<T, SdError>;

fn check(op: &'static str, r: c_int) -> SdResult<c_int> {
    if r < 0 { Err(SdError::Errno { op, errno: -r }) } else { Ok(r) }
}

fn cstring(s: &str) -> SdResult<CString> {
    CString::new(s).map_err(|_| SdError::Errno { op: "string with NUL byte", errno: libc::EINVAL })
}

/// Copies a C string owned by a message; `None` for NULL.
fn copy_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: sd-bus returned a NUL-terminated string that lives as long as the message we still hold.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// A started sd-bus connection (no Hello: a direct peer-to-peer connection).
pub(crate) struct Bus {
    raw: *mut SdBus,
}

// SAFETY: sd-bus has no thread affinity; a Bus is only ever used by one thread at a time (it is not Sync).
unsafe impl Send for Bus {}

impl Bus {
    /// Takes over `fd` (connected to a D-Bus peer), authenticates and starts the bus.
    pub(crate) fn start_on_fd(fd: OwnedFd) -> SdResult<Bus> {
        let mut raw = ptr::null_mut();
        // SAFETY: sd_bus_new writes a new bus object to `raw` on success.
        check("sd_bus_new", unsafe { sd_bus_new(&mut raw) })?;
        let bus = Bus { raw };
        let fd = fd.into_raw_fd();
        // SAFETY: the bus is valid; on success it owns the fd and closes it on unref.
        if let Err(e) = check("sd_bus_set_fd", unsafe { sd_bus_set_fd(bus.raw, fd, fd) }) {
            // SAFETY: the bus did not take the fd, so it is still ours to close.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        // SAFETY: the bus is valid and has its fd; start runs the SASL handshake.
        check("sd_bus_start", unsafe { sd_bus_start(bus.raw) })?;
        Ok(bus)
    }

    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: the bus is valid for the lifetime of self.
        unsafe { sd_bus_get_fd(self.raw) }
    }

    /// poll(2) events the bus waits for (POLLIN, plus POLLOUT while it has output queued).
    pub(crate) fn events(&self) -> SdResult<i16> {
        // SAFETY: the bus is valid for the lifetime of self.
        check("sd_bus_get_events", unsafe { sd_bus_get_events(self.raw) }).map(|e| e as i16)
    }

    /// Processes one unit of work. `Ok(None)` with `progressed == false`
    /// means nothing is pending; a message is returned when it is one nobody
    /// handled (signals: we install no callbacks and read them here).
    pub(crate) fn process(&self) -> SdResult<(bool, Option<Message>)> {
        let mut m = ptr::null_mut();
        // SAFETY: the bus is valid; `m` receives an owned reference or stays NULL.
        let r = check("sd_bus_process", unsafe { sd_bus_process(self.raw, &mut m) })?;
        Ok((r > 0, (!m.is_null()).then_some(Message { raw: m })))
    }

    /// A new method call to `destination` (NULL: the peer itself).
    pub(crate) fn method_call(&self, path: &str, interface: &str, member: &str) -> SdResult<Message> {
        let (path, interface, member) = (cstring(path)?, cstring(interface)?, cstring(member)?);
        let mut m = ptr::null_mut();
        // SAFETY: all strings are NUL-terminated and live across the call; a NULL destination is allowed.
        check("sd_bus_message_new_method_call", unsafe {
            sd_bus_message_new_method_call(
                self.raw,
                &mut m,
                c"org.freedesktop.systemd1".as_ptr(),
                path.as_ptr(),
                interface.as_ptr(),
                member.as_ptr(),
            )
        })?;
        Ok(Message { raw: m })
    }

    /// Sends `m` and waits up to `timeout_us` (0: sd-bus default, 25 s) for the reply.
    pub(crate) fn call(&self, m: &Message, timeout_us: u64) -> SdResult<Message> {
        let mut err = SdBusError { name: ptr::null(), message: ptr::null(), need_free: 0 };
        let mut reply = ptr::null_mut();
        // SAFETY: bus and message are valid; err and reply are out-parameters we own.
        let r = unsafe { sd_bus_call(self.raw, m.raw, timeout_us, &mut err, &mut reply) };
        let result = if r >= 0 {
            Ok(Message { raw: reply })
        } else if let Some(name) = copy_str(err.name) {
            Err(SdError::Reply { name, message: copy_str(err.message).unwrap_or_default() })
        } else {
            Err(SdError::Errno { op: "sd_bus_call", errno: -r })
        };
        // SAFETY: err was initialised above and possibly filled by sd_bus_call; free is idempotent.
        unsafe { sd_bus_error_free(&mut err) };
        result
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        // SAFETY: we own the only reference; this flushes, closes the fd and frees the bus.
        unsafe { sd_bus_flush_close_unref(self.raw) };
    }
}

/// An owned reference to an sd-bus message.
pub(crate) struct Message {
    raw: *mut SdBusMessage,
}

/// A value that can be appended as one D-Bus basic type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Basic<'a> {
    Str(&'a str),
    Bool(bool),
    U32(u32),
    I32(i32),
    U64(u64),
    /// A unix fd; sd-bus duplicates it into the message.
    Fd(RawFd),
}

impl Message {
    pub(crate) fn append(&mut self, v: Basic<'_>) -> SdResult<()> {
        let r = match v {
            Basic::Str(s) => {
                let c = cstring(s)?;
                // SAFETY: for 's' sd-bus reads a NUL-terminated string that lives across the call.
                unsafe { sd_bus_message_append_basic(self.raw, b's' as c_char, c.as_ptr().cast()) }
            }
            Basic::Bool(b) => self.append_raw(b'b', &c_int::from(b)),
            Basic::U32(x) => self.append_raw(b'u', &x),
            Basic::I32(x) => self.append_raw(b'i', &x),
            Basic::U64(x) => self.append_raw(b't', &x),
            Basic::Fd(fd) => self.append_raw(b'h', &fd),
        };
        check("sd_bus_message_append_basic", r).map(drop)
    }

    fn append_raw<T>(&mut self, t: u8, v: &T) -> c_int {
        // SAFETY: callers pair each type char with its C type (b/h: int, u: u32, i: i32, t: u64).
        unsafe { sd_bus_message_append_basic(self.raw, t as c_char, (v as *const T).cast()) }
    }

    /// Opens a container: `a` (contents: element signature), `r` (struct
    /// fields), `v` (the variant's type), `e` (dict entry).
    pub(crate) fn open(&mut self, typ: u8, contents: &str) -> SdResult<()> {
        let c = cstring(contents)?;
        // SAFETY: the message is valid and `c` is NUL-terminated and lives across the call.
        check("sd_bus_message_open_container", unsafe {
            sd_bus_message_open_container(self.raw, typ as c_char, c.as_ptr())
        })
        .map(drop)
    }

    pub(crate) fn close(&mut self) -> SdResult<()> {
        // SAFETY: the message is valid; sd-bus checks that a container is open.
        check("sd_bus_message_close_container", unsafe { sd_bus_message_close_container(self.raw) }).map(drop)
    }

    /// Enters a container for reading; `Ok(false)` at the end of the enclosing one.
    pub(crate) fn enter(&mut self, typ: u8, contents: &str) -> SdResult<bool> {
        let c = cstring(contents)?;
        // SAFETY: the message is valid and `c` is NUL-terminated and lives across the call.
        check("sd_bus_message_enter_container", unsafe {
            sd_bus_message_enter_container(self.raw, typ as c_char, c.as_ptr())
        })
        .map(|r| r > 0)
    }

    pub(crate) fn exit(&mut self) -> SdResult<()> {
        // SAFETY: the message is valid; sd-bus checks that a container was entered.
        check("sd_bus_message_exit_container", unsafe { sd_bus_message_exit_container(self.raw) }).map(drop)
    }

    /// Skips values of the given signature.
    pub(crate) fn skip(&mut self, types: &str) -> SdResult<()> {
        let c = cstring(types)?;
        // SAFETY: the message is valid and `c` is NUL-terminated and lives across the call.
        check("sd_bus_message_skip", unsafe { sd_bus_message_skip(self.raw, c.as_ptr()) }).map(drop)
    }

    /// Reads a string-like value (`s`, `o`, `g`).
    pub(crate) fn read_str(&mut self, t: u8) -> SdResult<String> {
        let mut p: *const c_char = ptr::null();
        // SAFETY: for string types sd-bus stores a pointer into the message, which we copy at once.
        check("sd_bus_message_read_basic", unsafe {
            sd_bus_message_read_basic(self.raw, t as c_char, (&mut p as *mut *const c_char).cast())
        })?;
        copy_str(p).ok_or(SdError::Errno { op: "sd_bus_message_read_basic", errno: libc::ENXIO })
    }

    pub(crate) fn read_u64(&mut self) -> SdResult<u64> {
        let mut v = 0u64;
        self.read_raw(b't', &mut v)?;
        Ok(v)
    }

    pub(crate) fn read_u32(&mut self) -> SdResult<u32> {
        let mut v = 0u32;
        self.read_raw(b'u', &mut v)?;
        Ok(v)
    }

    pub(crate) fn read_i32(&mut self) -> SdResult<i32> {
        let mut v = 0i32;
        self.read_raw(b'i', &mut v)?;
        Ok(v)
    }

    fn read_raw<T>(&mut self, t: u8, v: &mut T) -> SdResult<()> {
        // SAFETY: callers pair each type char with its C type (t: u64, u: u32, i: i32).
        check("sd_bus_message_read_basic", unsafe {
            sd_bus_message_read_basic(self.raw, t as c_char, (v as *mut T).cast())
        })
        .map(drop)
    }

    pub(crate) fn is_signal(&self) -> bool {
        let mut t = 0u8;
        // SAFETY: the message is valid; `t` is ours.
        let r = unsafe { sd_bus_message_get_type(self.raw, &mut t) };
        r >= 0 && t == MESSAGE_SIGNAL
    }

    pub(crate) fn interface(&self) -> Option<String> {
        // SAFETY: the message is valid; the result is copied while we hold it.
        copy_str(unsafe { sd_bus_message_get_interface(self.raw) })
    }

    pub(crate) fn member(&self) -> Option<String> {
        // SAFETY: the message is valid; the result is copied while we hold it.
        copy_str(unsafe { sd_bus_message_get_member(self.raw) })
    }

    pub(crate) fn path(&self) -> Option<String> {
        // SAFETY: the message is valid; the result is copied while we hold it.
        copy_str(unsafe { sd_bus_message_get_path(self.raw) })
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        // SAFETY: we own this reference.
        unsafe { sd_bus_message_unref(self.raw) };
    }
}
