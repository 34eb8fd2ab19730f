//! A cgroup v2 device program of rktlet's own: a `BPF_PROG_TYPE_CGROUP_DEVICE`
//! program built from an allow-list (`super::devices::Allowed`) and attached
//! to a cgroup with `BPF_F_ALLOW_MULTI`, so that the kernel checks every
//! open and mknod of a device by a process there against it and against
//! every program above it. The pod's own processes get one (the pod's
//! systemd attaches the apps' from `DeviceAllow=`).
//!
//! Our own smallest loader, not a crate: what exists (aya, libbpf-rs) loads
//! compiled ELF objects and brings a toolchain or a C library for it; a
//! device program is a dozen instructions, built here and handed to
//! `bpf(2)` as they are.

use super::devices::{Allowed, Kind};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 1 << 1;

// the program's context, `struct bpf_cgroup_dev_ctx`: access_type (access
// << 16 | type), major, minor; and the values in it
const DEV_BLOCK: i32 = 1;
const DEV_CHAR: i32 = 2;
const ACC_MKNOD: i32 = 1;
const ACC_READ: i32 = 2;
const ACC_WRITE: i32 = 4;

/// One eBPF instruction, as `struct bpf_insn` lays it out.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    code: u8,
    /// dst (low nibble) and src (high nibble) registers.
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | dst, off, imm }
}

/// `dst = *(u32 *)(src + off)`
const fn load_word(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x61, dst, src, off, 0)
}
/// `dst = src` (64-bit)
const fn mov_reg(dst: u8, src: u8) -> Insn {
    insn(0xbf, dst, src, 0, 0)
}
/// `dst = imm`
const fn mov_imm(dst: u8, imm: i32) -> Insn {
    insn(0xb7, dst, 0, 0, imm)
}
/// `dst &= imm`
const fn and_imm(dst: u8, imm: i32) -> Insn {
    insn(0x57, dst, 0, 0, imm)
}
/// `dst >>= imm`
const fn rsh_imm(dst: u8, imm: i32) -> Insn {
    insn(0x77, dst, 0, 0, imm)
}
/// `if dst != imm goto +off`
const fn jne_imm(dst: u8, imm: i32, off: i16) -> Insn {
    insn(0x55, dst, 0, off, imm)
}
const EXIT: Insn = insn(0x95, 0, 0, 0, 0);

/// The program for `allowed`: 1 (allow) for an access a rule covers, else 0.
pub(crate) fn program(allowed: &Allowed) -> Vec<Insn> {
    let mut p = vec![
        load_word(2, 1, 0),
        mov_reg(3, 2),
        and_imm(3, 0xffff),
        rsh_imm(2, 16),
        load_word(4, 1, 4),
        load_word(5, 1, 8),
    ];
    let rules = match allowed {
        Allowed::Everything => {
            p.extend([mov_imm(0, 1), EXIT]);
            return p;
        }
        Allowed::Only(rules) => rules,
    };
    for r in rules {
        let mut checks: Vec<(u8, i32)> = Vec::new();
        match r.kind {
            Kind::Char => checks.push((3, DEV_CHAR)),
            Kind::Block => checks.push((3, DEV_BLOCK)),
        }
        if let Some(major) = r.major.and_then(|m| i32::try_from(m).ok()) {
            checks.push((4, major));
        }
        if let Some(minor) = r.minor.and_then(|m| i32::try_from(m).ok()) {
            checks.push((5, minor));
        }
        let access = r.access.chars().fold(0, |a, c| {
            a | match c {
                'm' => ACC_MKNOD,
                'r' => ACC_READ,
                'w' => ACC_WRITE,
                _ => 0,
            }
        });
        // what follows each check in this rule's block: the other checks,
        // then the access test (3 instructions) and the allow (2)
        let block = checks.len() + 5;
        for (i, (reg, value)) in checks.iter().enumerate() {
            p.push(jne_imm(*reg, *value, (block - i - 1) as i16));
        }
        p.extend([mov_reg(0, 2), and_imm(0, !access & 7), jne_imm(0, 0, 2), mov_imm(0, 1), EXIT]);
    }
    p.extend([mov_imm(0, 0), EXIT]);
    p
}

/// `union bpf_attr` for BPF_PROG_LOAD (the fields used; the rest zero).
#[repr(C)]
#[derive(Default)]
struct LoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    rest: [u64; 8],
}

/// `union bpf_attr` for BPF_PROG_ATTACH.
#[repr(C)]
#[derive(Default)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
    rest: [u32; 11],
}

/// Loads the program for `allowed`; the verifier's log in the error.
pub(crate) fn load(allowed: &Allowed) -> io::Result<OwnedFd> {
    let insns = program(allowed);
    let license = c"GPL";
    let mut log = vec![0u8; 4096];
    let mut name = [0u8; 16];
    name[..14].copy_from_slice(b"rktlet_devices");
    let attr = LoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_CGROUP_DEVICE,
        ..Default::default()
    };
    let fd = bpf(BPF_PROG_LOAD, &attr).map_err(|e| {
        let log = String::from_utf8_lossy(&log);
        let log = log.trim_end_matches('\0').trim();
        let said = if log.is_empty() { String::new() } else { format!(" (verifier: {log})") };
        io::Error::new(e.kind(), format!("loading the device program: {e}{said}"))
    })?;
    // SAFETY: the kernel just returned this descriptor; we own it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// bpf(2) command `cmd` with `attr`, a zero-padded `union bpf_attr` whose
/// pointers outlive the call; its non-negative answer.
fn bpf<T>(cmd: libc::c_long, attr: &T) -> io::Result<libc::c_long> {
    // SAFETY: bpf(2) with an attribute of its own size, as the caller vouches.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *const T, size_of::<T>()) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc) }
}

/// Attaches `program` to the cgroup v2 directory `cgroup`, beside the
/// programs there and above it (all must allow).
pub(crate) fn attach(program: &OwnedFd, cgroup: &Path) -> io::Result<()> {
    let dir =
        std::fs::File::open(cgroup).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", cgroup.display())))?;
    let attr = AttachAttr {
        target_fd: dir.as_raw_fd() as u32,
        attach_bpf_fd: program.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        ..Default::default()
    };
    bpf(BPF_PROG_ATTACH, &attr)
        .map(drop)
        .map_err(|e| io::Error::new(e.kind(), format!("attaching the device program to {}: {e}", cgroup.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on one access, as the kernel would (a tiny
    /// interpreter of the instructions `program` emits).
    fn run(p: &[Insn], kind: i32, access: i32, major: u32, minor: u32) -> u64 {
        let ctx = [((access as u32) << 16) | kind as u32, major, minor];
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        loop {
            let i = p[pc];
            let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
            pc += 1;
            match i.code {
                0x61 => r[dst] = u64::from(ctx[(i.off / 4) as usize]),
                0xbf => r[dst] = r[src],
                0xb7 => r[dst] = i.imm as i64 as u64,
                0x57 => r[dst] &= i.imm as i64 as u64,
                0x77 => r[dst] >>= i.imm,
                0x55 => {
                    if r[dst] != i.imm as i64 as u64 {
                        pc = (pc as isize + i.off as isize) as usize;
                    }
                }
                0x95 => return r[0],
                c => panic!("unknown instruction {c:#x}"),
            }
        }
    }

    #[test]
    fn the_program_allows_exactly_the_list() {
        let p = program(&Allowed::for_container(false, [('b', 8, 0, "r")]));
        let allow = |kind, access, major, minor| run(&p, kind, access, major, minor) == 1;
        assert!(allow(DEV_CHAR, ACC_READ | ACC_WRITE, 1, 3), "/dev/null");
        assert!(allow(DEV_CHAR, ACC_READ | ACC_WRITE, 136, 7), "a pts");
        assert!(allow(DEV_CHAR, ACC_MKNOD, 10, 232), "making any node");
        assert!(allow(DEV_BLOCK, ACC_MKNOD, 7, 0), "making any node");
        assert!(!allow(DEV_CHAR, ACC_READ, 10, 232), "kvm");
        assert!(!allow(DEV_CHAR, ACC_READ | ACC_WRITE, 5, 1), "the console");
        assert!(!allow(DEV_BLOCK, ACC_READ, 7, 0), "loop0");
        assert!(allow(DEV_BLOCK, ACC_READ, 8, 0), "the device given 'r'");
        assert!(!allow(DEV_BLOCK, ACC_READ | ACC_WRITE, 8, 0), "... not for writing");
        assert!(!allow(DEV_BLOCK, ACC_READ, 8, 1), "... only that minor");
        let own = program(&Allowed::pod_own());
        assert_eq!(run(&own, DEV_BLOCK, ACC_MKNOD, 7, 0), 0, "the pod's processes make no block node");
        assert_eq!(run(&own, DEV_CHAR, ACC_READ, 1, 9), 1);
        let all = program(&Allowed::Everything);
        assert_eq!(run(&all, DEV_BLOCK, ACC_READ | ACC_WRITE, 8, 0), 1);
    }
}
