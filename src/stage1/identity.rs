//! The identity an app runs with: its uid, gid and supplementary groups,
//! resolved as containerd does from what the container asks for and the
//! image's `/etc/passwd` and `/etc/group`.
//!
//! The supplementary groups are the effective list the app's first process
//! gets (`setgroups(2)`), as runc gets it from containerd: the primary gid,
//! the groups the image's `/etc/group` lists the user in (unless the policy
//! is [`GroupsPolicy::Strict`]) and the ones asked for, sorted, without
//! duplicates. ContainerStatus reports that list.

use std::path::Path;

/// Why an identity cannot be resolved (the request is at fault).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    #[error("run_as_group is set without run_as_user or run_as_username")]
    GroupWithoutUser,
    #[error("user {0:?} not found in the image's /etc/passwd")]
    UnknownUser(String),
    #[error("group {0:?} not found in the image's /etc/group")]
    UnknownGroup(String),
    #[error("{what} {value} is not a valid id")]
    BadId { what: &'static str, value: i64 },
}

/// How the supplementary groups are made (CRI's `SupplementalGroupsPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupsPolicy {
    /// The image's groups of the user, plus the ones asked for.
    #[default]
    Merge,
    /// Only the primary gid and the ones asked for.
    Strict,
}

/// What the container asks for (its security context), ids as CRI sends them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    pub run_as_user: Option<i64>,
    pub run_as_username: String,
    pub run_as_group: Option<i64>,
    pub supplemental_groups: Vec<i64>,
    pub policy: GroupsPolicy,
}

/// The resolved identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// The effective supplementary groups, `gid` among them.
    pub groups: Vec<u32>,
}

fn id(what: &'static str, value: i64) -> Result<u32, IdentityError> {
    u32::try_from(value).map_err(|_| IdentityError::BadId { what, value })
}

/// Resolves the identity: the security context wins over the image's
/// `user[:group]` (`image_user`, `image_group`); names are looked up in the
/// image's /etc files under `rootfs`.
pub fn resolve(rootfs: &Path, image_user: &str, image_group: &str, asked: &Asked) -> Result<Identity, IdentityError> {
    let (mut user, mut group) = match image_user.split_once(':') {
        Some((u, g)) => (u.to_string(), g.to_string()),
        None => (image_user.to_string(), image_group.to_string()),
    };
    // as containerd: a group alone would run as the image's user with a
    // group it did not choose
    if asked.run_as_group.is_some() && asked.run_as_user.is_none() && asked.run_as_username.is_empty() {
        return Err(IdentityError::GroupWithoutUser);
    }
    // a user of the security context replaces the image's `user:group`
    // whole: its group is the user's primary one unless run_as_group says
    if let Some(u) = asked.run_as_user {
        (user, group) = (id("run_as_user", u)?.to_string(), String::new());
    } else if !asked.run_as_username.is_empty() {
        (user, group) = (asked.run_as_username.clone(), String::new());
    }
    if let Some(g) = asked.run_as_group {
        group = id("run_as_group", g)?.to_string();
    }
    let (uid, primary) = match user.parse::<u32>() {
        Ok(uid) => (uid, passwd_field(rootfs, uid, 3).and_then(|g| g.parse().ok())),
        Err(_) if user.is_empty() => (0, Some(0)),
        Err(_) => {
            let (uid, gid) = lookup(rootfs, "passwd", &user).ok_or_else(|| IdentityError::UnknownUser(user.clone()))?;
            (uid, Some(gid))
        }
    };
    let gid = match group.parse::<u32>() {
        Ok(g) => g,
        Err(_) if group.is_empty() || group == user => primary.unwrap_or(uid),
        Err(_) => lookup(rootfs, "group", &group).map(|(g, _)| g).ok_or(IdentityError::UnknownGroup(group))?,
    };
    let mut groups = vec![gid];
    if asked.policy == GroupsPolicy::Merge {
        groups.extend(member_groups(rootfs, &user, uid));
    }
    for g in &asked.supplemental_groups {
        groups.push(id("supplemental_groups", *g)?);
    }
    groups.sort_unstable();
    groups.dedup();
    Ok(Identity { uid, gid, groups })
}

/// The home directory of `uid` in the image's /etc/passwd, if it names one.
pub fn home(rootfs: &Path, uid: u32) -> Option<String> {
    passwd_field(rootfs, uid, 5).filter(|h| !h.is_empty())
}

/// A text file of the image, its symlinks followed inside the image.
fn read_in_image(rootfs: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(super::app::target_in(rootfs, Path::new(file)).ok()?).ok()
}

/// Looks `name` up in a passwd/group style file of the image: returns (id, primary gid).
fn lookup(rootfs: &Path, file: &str, name: &str) -> Option<(u32, u32)> {
    let text = read_in_image(rootfs, &format!("/etc/{file}"))?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        if f.first() != Some(&name) {
            return None;
        }
        Some((f.get(2)?.parse().ok()?, f.get(3).and_then(|g| g.parse().ok()).unwrap_or(0)))
    })
}

/// The groups the image's /etc/group lists `user` as a member of, as
/// containerd adds them: the member lists name users, so a numeric uid
/// counts by the name the image's /etc/passwd gives it (uid 0 is `root`
/// there too).
fn member_groups(rootfs: &Path, user: &str, uid: u32) -> Vec<u32> {
    let name = if user.is_empty() || user.parse::<u32>().is_ok() {
        match passwd_field(rootfs, uid, 0) {
            Some(name) if !name.is_empty() => name,
            _ => return Vec::new(),
        }
    } else {
        user.to_string()
    };
    let text = read_in_image(rootfs, "/etc/group").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let members = f.get(3)?;
            if !members.split(',').any(|m| m.trim() == name) {
                return None;
            }
            f.get(2)?.parse().ok()
        })
        .collect()
}

/// Field `n` of the image's `/etc/passwd` entry of `uid`.
fn passwd_field(rootfs: &Path, uid: u32, n: usize) -> Option<String> {
    let text = read_in_image(rootfs, "/etc/passwd")?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        if f.get(2).and_then(|u| u.parse::<u32>().ok()) != Some(uid) {
            return None;
        }
        f.get(n).map(|v| v.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> tempfile::TempDir {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(t.path().join("etc")).expect("etc");
        std::fs::write(t.path().join("etc/passwd"), "root:x:0:0::/root:/bin/sh\nweb:x:1000:1001::/:/bin/sh\n")
            .expect("w");
        std::fs::write(t.path().join("etc/group"), "root:x:0:\nweb:x:1001:\nextra:x:2000:web,other\n").expect("w");
        t
    }

    fn ids(uid: u32, gid: u32, groups: &[u32]) -> Identity {
        Identity { uid, gid, groups: groups.to_vec() }
    }

    #[test]
    fn users_and_groups_from_the_image() {
        let t = image();
        let none = Asked::default();
        assert_eq!(resolve(t.path(), "web", "", &none), Ok(ids(1000, 1001, &[1001, 2000])));
        assert_eq!(resolve(t.path(), "1000:extra", "", &none), Ok(ids(1000, 2000, &[2000])));
        let sc = Asked {
            run_as_user: Some(4242),
            run_as_group: Some(77),
            supplemental_groups: vec![5, 6],
            ..Default::default()
        };
        assert_eq!(resolve(t.path(), "web", "", &sc), Ok(ids(4242, 77, &[5, 6, 77])));
        assert_eq!(resolve(t.path(), "", "", &none), Ok(ids(0, 0, &[0])));
        // a numeric uid gets its name's groups; the SC's are added
        assert_eq!(resolve(t.path(), "1000", "", &none), Ok(ids(1000, 1001, &[1001, 2000])));
        let by_uid = Asked { run_as_user: Some(1000), supplemental_groups: vec![7], ..Default::default() };
        assert_eq!(resolve(t.path(), "", "", &by_uid), Ok(ids(1000, 1001, &[7, 1001, 2000])));
        // the image's group goes with the image's user
        assert_eq!(resolve(t.path(), "0", "0", &by_uid), Ok(ids(1000, 1001, &[7, 1001, 2000])));
        // a group without a user is refused, by uid or by name
        let group_only = Asked { run_as_group: Some(5), ..Default::default() };
        assert_eq!(resolve(t.path(), "web", "", &group_only), Err(IdentityError::GroupWithoutUser));
        let by_name = Asked { run_as_username: "web".into(), ..group_only.clone() };
        assert_eq!(resolve(t.path(), "", "", &by_name), Ok(ids(1000, 5, &[5, 2000])));
        assert_eq!(resolve(t.path(), "nobody", "", &none), Err(IdentityError::UnknownUser("nobody".into())));
        assert_eq!(resolve(t.path(), "web:nogroup", "", &none), Err(IdentityError::UnknownGroup("nogroup".into())));
        let negative = Asked { run_as_user: Some(-1), ..Default::default() };
        assert!(matches!(resolve(t.path(), "", "", &negative), Err(IdentityError::BadId { .. })));
    }

    #[test]
    fn strict_leaves_out_the_image_groups() {
        let t = image();
        let strict = |asked: Asked| Asked { policy: GroupsPolicy::Strict, ..asked };
        assert_eq!(resolve(t.path(), "web", "", &strict(Asked::default())), Ok(ids(1000, 1001, &[1001])));
        let sc = Asked { run_as_user: Some(1000), supplemental_groups: vec![7], ..Default::default() };
        assert_eq!(resolve(t.path(), "", "", &strict(sc.clone())), Ok(ids(1000, 1001, &[7, 1001])));
        assert_eq!(resolve(t.path(), "", "", &sc), Ok(ids(1000, 1001, &[7, 1001, 2000])));
        let with_group = Asked { run_as_group: Some(3000), ..sc };
        assert_eq!(resolve(t.path(), "", "", &strict(with_group)), Ok(ids(1000, 3000, &[7, 3000])));
    }
}
