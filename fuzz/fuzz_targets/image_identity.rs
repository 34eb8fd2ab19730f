//! An image's /etc/passwd and /etc/group (the input, split at its first NUL
//! byte), read by hand to resolve a container's user and groups: never
//! panics, and what resolves holds its gid among its groups.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rktlet::stage1::identity::{Asked, GroupsPolicy, resolve};

fuzz_target!(|data: &[u8]| {
    let mut files = data.splitn(2, |b| *b == 0);
    let (passwd, group) = (files.next().unwrap_or_default(), files.next().unwrap_or_default());
    let Ok(t) = tempfile::tempdir() else { return };
    let etc = t.path().join("etc");
    if std::fs::create_dir(&etc).is_err()
        || std::fs::write(etc.join("passwd"), passwd).is_err()
        || std::fs::write(etc.join("group"), group).is_err()
    {
        return;
    }
    let merge = Asked::default();
    let strict = Asked { policy: GroupsPolicy::Strict, supplemental_groups: vec![5, 0], ..Asked::default() };
    for (user, group) in [("", ""), ("root", ""), ("app", "app"), ("1000", ""), ("app:staff", ""), ("0:0", "")] {
        for asked in [&merge, &strict] {
            if let Ok(id) = resolve(t.path(), user, group, asked) {
                assert!(id.groups.contains(&id.gid), "{id:?}");
                let _ = rktlet::stage1::identity::home(t.path(), id.uid);
            }
        }
    }
});
