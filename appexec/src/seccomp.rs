//! The filter that denies again what the app's own seccomp profile denied
//! and systemd had to let through (`deny=`): built here, pure, installed by
//! `main.rs`.
//!
//! The kernel may run the app's code as the build target's architecture or
//! as its 32-bit compat one (i386 on x86_64, arm on aarch64), each with its
//! own syscall numbers: the filter checks both. The target's numbers are
//! libc's (`libc::SYS_*`); libc has no compat numbers for a 64-bit target, so
//! those (and x32's one) stay written here, from the kernel's tables
//! (`arch/x86/entry/syscalls/syscall_32.tbl`, `arch/arm/tools/syscall.tbl`;
//! the same as libc 0.2.191's for the i686 and arm targets).

use libc::sock_filter;

/// `AUDIT_ARCH_*` of `linux/audit.h`, as `seccomp_data.arch` reports them.
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH_NATIVE: u32 = 0xc000_003e;
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH_COMPAT: u32 = 0x4000_0003;
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH_NATIVE: u32 = 0xc000_00b7;
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH_COMPAT: u32 = 0x4000_0028;

/// x32 calls are x86_64's with bit 30 set, the same numbers but for a few
/// of x32's own above 511 (none of which is an x86_64 call): the filter
/// compares numbers without that bit, on every architecture (no other sets it).
pub const X32_BIT: u32 = 0x4000_0000;

/// The calls this program may be asked to deny again (the daemon's
/// `stage1::appexec` lists), with the build target's numbers.
const NATIVE: &[(&str, libc::c_long)] = &[
    ("mount", libc::SYS_mount),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("pivot_root", libc::SYS_pivot_root),
    ("umount2", libc::SYS_umount2),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("chdir", libc::SYS_chdir),
    #[cfg(target_arch = "x86_64")]
    ("symlink", libc::SYS_symlink),
    ("symlinkat", libc::SYS_symlinkat),
    // (aarch64 has mkdirat only)
    #[cfg(target_arch = "x86_64")]
    ("mkdir", libc::SYS_mkdir),
    ("mkdirat", libc::SYS_mkdirat),
    ("openat", libc::SYS_openat),
    ("openat2", libc::SYS_openat2),
    ("socket", libc::SYS_socket),
    ("sendto", libc::SYS_sendto),
    ("read", libc::SYS_read),
    ("close", libc::SYS_close),
    ("clone", libc::SYS_clone),
    ("wait4", libc::SYS_wait4),
    ("kill", libc::SYS_kill),
    ("getpid", libc::SYS_getpid),
    ("pipe2", libc::SYS_pipe2),
    ("newfstatat", libc::SYS_newfstatat),
    ("statx", libc::SYS_statx),
    ("rt_sigaction", libc::SYS_rt_sigaction),
    ("waitid", libc::SYS_waitid),
    ("nanosleep", libc::SYS_nanosleep),
    ("clock_nanosleep", libc::SYS_clock_nanosleep),
];

/// Whether `name` is a call this program can deny again.
pub fn knows(name: &str) -> bool {
    NATIVE.iter().any(|(n, _)| *n == name) || COMPAT.iter().any(|(n, _)| *n == name)
}

/// x32's own number for a call of [`NATIVE`] (see [`X32_BIT`]).
#[cfg(target_arch = "x86_64")]
const X32_OWN: &[(&str, u32)] = &[("rt_sigaction", 512)];
#[cfg(target_arch = "aarch64")]
const X32_OWN: &[(&str, u32)] = &[];

/// The same calls' numbers for the compat architecture: i386's (its
/// fstatat64 for newfstatat).
#[cfg(target_arch = "x86_64")]
const COMPAT: &[(&str, u32)] = &[
    ("mount", 21),
    ("unshare", 310),
    ("setns", 346),
    ("mount_setattr", 442),
    ("open_tree", 428),
    ("move_mount", 429),
    ("pivot_root", 217),
    ("umount2", 52),
    ("fsopen", 430),
    ("fsconfig", 431),
    ("fsmount", 432),
    ("chdir", 12),
    ("symlink", 83),
    ("symlinkat", 304),
    ("mkdir", 39),
    ("mkdirat", 296),
    ("openat", 295),
    ("openat2", 437),
    ("socket", 359),
    ("sendto", 369),
    ("read", 3),
    ("close", 6),
    ("clone", 120),
    ("wait4", 114),
    ("kill", 37),
    ("getpid", 20),
    ("pipe2", 331),
    ("newfstatat", 300),
    ("statx", 383),
    ("rt_sigaction", 174),
    ("waitid", 284),
    ("nanosleep", 162),
    ("clock_nanosleep", 267),
];
/// 32-bit arm's (its fstatat64 for newfstatat).
#[cfg(target_arch = "aarch64")]
const COMPAT: &[(&str, u32)] = &[
    ("mount", 21),
    ("unshare", 337),
    ("setns", 375),
    ("mount_setattr", 442),
    ("open_tree", 428),
    ("move_mount", 429),
    ("pivot_root", 218),
    ("umount2", 52),
    ("fsopen", 430),
    ("fsconfig", 431),
    ("fsmount", 432),
    ("chdir", 12),
    ("symlink", 83),
    ("symlinkat", 331),
    ("mkdir", 39),
    ("mkdirat", 323),
    ("openat", 322),
    ("openat2", 437),
    ("socket", 281),
    ("sendto", 290),
    ("read", 3),
    ("close", 6),
    ("clone", 120),
    ("wait4", 114),
    ("kill", 37),
    ("getpid", 20),
    ("pipe2", 359),
    ("newfstatat", 327),
    ("statx", 397),
    ("rt_sigaction", 174),
    ("waitid", 280),
    ("nanosleep", 162),
    ("clock_nanosleep", 265),
];

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
/// Offsets in `struct seccomp_data`: the call's number, then the architecture.
const NR: u32 = 0;
const ARCH: u32 = 4;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The filter program: for each architecture, the named calls fail with
/// `errno` (or kill the process, as the profile would); everything else is
/// allowed, left to the filters below it (systemd's, the app's).
pub fn program(deny: &[String], errno: Option<u32>) -> Vec<sock_filter> {
    let ret_deny = errno.map_or(libc::SECCOMP_RET_KILL_PROCESS, |e| libc::SECCOMP_RET_ERRNO | (e & 0xffff));
    let denied = |name: &str| deny.iter().any(|d| d == name);
    let native = NATIVE.iter().map(|(name, nr)| (*name, *nr as u32)).chain(X32_OWN.iter().copied());
    let tables: [(u32, Vec<u32>); 2] = [
        (AUDIT_ARCH_NATIVE, native.filter(|(name, _)| denied(name)).map(|(_, nr)| nr).collect()),
        (AUDIT_ARCH_COMPAT, COMPAT.iter().filter(|(name, _)| denied(name)).map(|(_, nr)| *nr).collect()),
    ];
    let mut prog = Vec::new();
    for (arch, numbers) in tables {
        // [load arch] [arch check] [load nr] [clear the x32 bit] [one jeq per number] [allow] [deny]
        let n = u8::try_from(numbers.len()).expect("fewer than 256 calls");
        prog.push(insn(LD_W_ABS, 0, 0, ARCH));
        prog.push(insn(JEQ_K, 0, n + 4, arch));
        prog.push(insn(LD_W_ABS, 0, 0, NR));
        prog.push(insn(AND_K, 0, 0, !X32_BIT));
        for (i, nr) in numbers.iter().enumerate() {
            // to the deny return: past the rest of the jeqs and the allow
            prog.push(insn(JEQ_K, n - i as u8, 0, *nr));
        }
        prog.push(insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
        prog.push(insn(RET_K, 0, 0, ret_deny));
    }
    prog.push(insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
    prog
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a program of the instructions [`program`] uses on a call, as
    /// the kernel would: its return value.
    fn run(prog: &[sock_filter], arch: u32, nr: u32) -> u32 {
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = prog.get(pc).expect("the program ran off its end");
            pc += 1;
            match i.code {
                LD_W_ABS => {
                    acc = match i.k {
                        NR => nr,
                        ARCH => arch,
                        k => panic!("load of offset {k}"),
                    }
                }
                AND_K => acc &= i.k,
                JEQ_K => pc += usize::from(if acc == i.k { i.jt } else { i.jf }),
                RET_K => return i.k,
                code => panic!("instruction {code:#x}"),
            }
        }
    }

    fn deny(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn nr(name: &str, table: &[(&str, u32)]) -> u32 {
        table.iter().find(|(n, _)| *n == name).unwrap().1
    }

    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | 1;
    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;

    #[test]
    fn denies_the_named_calls_on_both_architectures() {
        let prog = program(&deny(&["mount", "unshare", "pivot_root"]), Some(1));
        for name in ["mount", "unshare", "pivot_root"] {
            let native = NATIVE.iter().find(|(n, _)| *n == name).unwrap().1 as u32;
            assert_eq!(run(&prog, AUDIT_ARCH_NATIVE, native), EPERM, "{name}");
            assert_eq!(run(&prog, AUDIT_ARCH_COMPAT, nr(name, COMPAT)), EPERM, "{name} (compat)");
        }
        assert_eq!(run(&prog, AUDIT_ARCH_NATIVE, libc::SYS_mount as u32), EPERM);
        for allowed in [libc::SYS_read, libc::SYS_execve, libc::SYS_setns, libc::SYS_write] {
            assert_eq!(run(&prog, AUDIT_ARCH_NATIVE, allowed as u32), ALLOW, "{allowed}");
        }
        // i386's/arm's read (3) is not x86_64's/aarch64's mount
        assert_eq!(run(&prog, AUDIT_ARCH_COMPAT, 3), ALLOW);
        // an architecture the filter does not know: left to the filters below
        assert_eq!(run(&prog, 0xdead_beef, libc::SYS_mount as u32), ALLOW);
    }

    #[test]
    fn the_errno_or_a_kill() {
        let kill = program(&deny(&["setns"]), None);
        assert_eq!(run(&kill, AUDIT_ARCH_NATIVE, libc::SYS_setns as u32), libc::SECCOMP_RET_KILL_PROCESS);
        // the errno is 16 bits of the return value
        let odd = program(&deny(&["setns"]), Some(0x1_0026));
        assert_eq!(run(&odd, AUDIT_ARCH_NATIVE, libc::SYS_setns as u32), libc::SECCOMP_RET_ERRNO | 0x26);
    }

    #[test]
    fn nothing_denied_allows_everything() {
        let prog = program(&[], Some(1));
        for nr in 0..600 {
            assert_eq!(run(&prog, AUDIT_ARCH_NATIVE, nr), ALLOW);
            assert_eq!(run(&prog, AUDIT_ARCH_COMPAT, nr), ALLOW);
        }
        // unknown names add nothing either
        assert_eq!(program(&deny(&["no_such_call"]), Some(1)).len(), prog.len());
    }

    /// Every call of both tables denied: the jumps still land (the longest
    /// program the daemon can ask for), and only those calls are denied.
    #[test]
    fn every_call_denied() {
        let all: Vec<String> = NATIVE.iter().map(|(n, _)| n.to_string()).chain(deny(&["mkdir"])).collect();
        let prog = program(&all, Some(1));
        let natives: Vec<u32> =
            NATIVE.iter().map(|(_, nr)| *nr as u32).chain(X32_OWN.iter().map(|(_, nr)| *nr)).collect();
        for nr in 0..600 {
            let want = if natives.contains(&nr) { EPERM } else { ALLOW };
            assert_eq!(run(&prog, AUDIT_ARCH_NATIVE, nr), want, "native {nr}");
            let want = if COMPAT.iter().any(|(_, c)| *c == nr) { EPERM } else { ALLOW };
            assert_eq!(run(&prog, AUDIT_ARCH_COMPAT, nr), want, "compat {nr}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_calls_are_denied_too() {
        let prog = program(&deny(&["mount", "rt_sigaction"]), Some(1));
        assert_eq!(run(&prog, AUDIT_ARCH_NATIVE, libc::SYS_mount as u32 | X32_BIT), EPERM);
        // x32's own rt_sigaction, and x86_64's
        assert_eq!(run(&prog, AUDIT_ARCH_NATIVE, 512 | X32_BIT), EPERM);
        assert_eq!(run(&prog, AUDIT_ARCH_NATIVE, libc::SYS_rt_sigaction as u32), EPERM);
    }

    /// Every call has a number on both architectures (the daemon's own
    /// lists are checked against [`knows`] by appexec's option parsing, in
    /// every test that starts a container through it).
    #[test]
    fn every_call_has_both_numbers() {
        for (name, _) in NATIVE {
            assert!(COMPAT.iter().any(|(n, _)| n == name), "{name} (compat)");
        }
        assert_eq!(NATIVE.len() + usize::from(cfg!(target_arch = "aarch64")), COMPAT.len());
        assert!(knows("mkdir") && knows("rt_sigaction") && !knows("no_such_call"));
    }
}
