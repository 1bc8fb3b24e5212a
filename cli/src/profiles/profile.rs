//! Profiles: what `human-plus join` saves, and `--profile NAME` reads.
//!
//! A profile is a directory, `<config>/profiles/NAME/`, where `<config>` is
//! `$HUMAN_PLUS_CONFIG_DIR`, else `$XDG_CONFIG_HOME/human-plus`, else
//! `~/.config/human-plus` (`%APPDATA%\human-plus` on Windows). It holds:
//!
//! * `profile.json`: the invitation without its token (relay, session,
//!   surface, application), trust (the allowlist) and egress;
//! * `token`: the relay token alone, readable by the user only (0600); a
//!   profile whose token file grants the group or others anything is
//!   refused, as ssh refuses such a key;
//! * `pins.json`: `{"name": "sha256:..."}`, when the person pinned the
//!   definitions they reviewed;
//! * `reviewed.json`: the definitions the person reviewed (written by the
//!   review work; today only checked, never read).
//!
//! Every file is written to a temporary file in the same directory and
//! renamed into place (0600); the directory is created readable by the
//! user only (0700). Whoever can write a profile chooses the relay, the
//! trust, the egress and the pins the bridge obeys, so a profile is read
//! only when its directory and every file it is read from belong to the
//! user (or root) and cannot be written by the group or others (ssh's rule
//! for its configuration), and its token file only when the group and
//! others have no access at all (ssh's rule for a key): [`read_profile_file`],
//! [`check_profile_path`]. The rules (names, permissions, owners) are the
//! core's; this module reads and writes the files.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use human_plus_core::{
    IpNet, ReverbChannel, ToolDefinition, is_valid_profile_name, profile_file_mode_is_safe,
    profile_file_owner_is_safe, token_file_mode_is_private,
};
use serde::{Deserialize, Serialize};

use crate::args::{AuthMode, EgressArgs};
use crate::output::exit::Failure;

/// The environment variable that overrides the configuration directory.
pub const CONFIG_DIR_ENV: &str = "HUMAN_PLUS_CONFIG_DIR";

/// The profile document's version.
pub const PROFILE_VERSION: u32 = 1;

/// The profile file's name inside a profile directory.
pub const PROFILE_FILE: &str = "profile.json";
/// The token file's name inside a profile directory.
pub const TOKEN_FILE: &str = "token";
/// The pins file's name inside a profile directory.
pub const PINS_FILE: &str = "pins.json";
/// The reviewed definitions' file name inside a profile directory (the
/// definitions the person reviewed, beside their pins).
pub const REVIEWED_FILE: &str = "reviewed.json";

/// `profile.json`: everything but the token and the pins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The document's version, [`PROFILE_VERSION`].
    pub version: u32,
    /// The relay's base URL; for a page on a Reverb channel, the host
    /// app's auth bridge (the one HTTP endpoint such an invitation has).
    pub relay: String,
    /// The relay session id.
    pub session: String,
    /// The Reverb (Pusher-protocol) channel the page is on, when the link
    /// named one instead of a relay: its WebSocket URL, auth bridge (equal
    /// to `relay`) and channel. Not written for a relay, so a relay
    /// profile reads and writes as before; a binary older than the field
    /// refuses a profile that has it (unknown field) rather than taking
    /// the auth bridge for a relay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverb: Option<ReverbChannel>,
    /// The surface id.
    pub surface: String,
    /// The application name.
    pub application: String,
    /// The tools trusted (an allowlist, never "every tool").
    pub allow: Vec<String>,
    /// Egress.
    pub egress: ProfileEgress,
}

/// A profile's egress: what the flags of the same names say.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileEgress {
    /// `--allow-host`.
    #[serde(default)]
    pub allow_host: Vec<String>,
    /// `--allow-port`.
    #[serde(default)]
    pub allow_port: Vec<u16>,
    /// `--egress-proxy` (never with credentials).
    #[serde(default)]
    pub egress_proxy: Option<String>,
    /// `--proxy-auth-file` (the path, never the credentials).
    #[serde(default)]
    pub proxy_auth_file: Option<PathBuf>,
    /// `--allow-unverified-egress`.
    #[serde(default)]
    pub allow_unverified_egress: bool,
    /// `--allow-insecure-loopback`.
    #[serde(default)]
    pub allow_insecure_loopback: bool,
    /// `--allow-address` (CIDRs).
    #[serde(default)]
    pub allow_address: Vec<String>,
    /// `--ca-cert`.
    #[serde(default)]
    pub ca_cert: Option<PathBuf>,
    /// `--auth`: `query` or `bearer`.
    #[serde(default)]
    pub auth: Option<String>,
}

impl ProfileEgress {
    /// The egress of these flags, paths made absolute so the profile works
    /// from any directory.
    #[must_use]
    pub fn from_args(args: &EgressArgs) -> Self {
        ProfileEgress {
            allow_host: args.allow_host.clone(),
            allow_port: args.allow_port.clone(),
            egress_proxy: args.egress_proxy.clone(),
            proxy_auth_file: args.proxy_auth_file.as_deref().map(absolute),
            allow_unverified_egress: args.allow_unverified_egress,
            allow_insecure_loopback: args.allow_insecure_loopback,
            allow_address: args.allow_address.iter().map(IpNet::to_string).collect(),
            ca_cert: args.ca_cert.as_deref().map(absolute),
            auth: args.auth.map(|a| match a {
                AuthMode::Query => "query".to_owned(),
                AuthMode::Bearer => "bearer".to_owned(),
            }),
        }
    }

    /// These flags over this profile's egress: a flag that is given wins
    /// (a list replaces the profile's list; a switch that is on stays on).
    ///
    /// # Errors
    /// A usage failure for an `auth` the profile cannot hold.
    pub fn under(&self, flags: &EgressArgs) -> Result<EgressArgs, Failure> {
        let or = |flag: &Vec<String>, profile: &Vec<String>| {
            if flag.is_empty() {
                profile.clone()
            } else {
                flag.clone()
            }
        };
        let auth = match (flags.auth, self.auth.as_deref()) {
            (Some(a), _) => Some(a),
            (None, None) => None,
            (None, Some("query")) => Some(AuthMode::Query),
            (None, Some("bearer")) => Some(AuthMode::Bearer),
            (None, Some(_)) => {
                return Err(Failure::usage(
                    "the profile's egress.auth must be \"query\" or \"bearer\"",
                ));
            }
        };
        Ok(EgressArgs {
            allow_host: or(&flags.allow_host, &self.allow_host),
            allow_port: if flags.allow_port.is_empty() {
                self.allow_port.clone()
            } else {
                flags.allow_port.clone()
            },
            egress_proxy: flags
                .egress_proxy
                .clone()
                .or_else(|| self.egress_proxy.clone()),
            proxy_auth_file: flags
                .proxy_auth_file
                .clone()
                .or_else(|| self.proxy_auth_file.clone()),
            allow_unverified_egress: flags.allow_unverified_egress || self.allow_unverified_egress,
            allow_insecure_loopback: flags.allow_insecure_loopback || self.allow_insecure_loopback,
            allow_address: if flags.allow_address.is_empty() {
                self.allow_address
                    .iter()
                    .map(|n| {
                        n.parse::<IpNet>().map_err(|_| {
                            Failure::usage(format!(
                                "the profile's egress.allow_address [{}] is not a CIDR",
                                crate::output::exit::printable(n)
                            ))
                        })
                    })
                    .collect::<Result<_, _>>()?
            } else {
                flags.allow_address.clone()
            },
            ca_cert: flags.ca_cert.clone().or_else(|| self.ca_cert.clone()),
            auth,
        })
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The configuration directory: `$HUMAN_PLUS_CONFIG_DIR`, else
/// `$XDG_CONFIG_HOME/human-plus`, else `~/.config/human-plus` (on Windows
/// `%APPDATA%\human-plus`).
///
/// # Errors
/// A usage failure when none of them can be found.
pub fn config_dir() -> Result<PathBuf, Failure> {
    let env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = env(CONFIG_DIR_ENV) {
        return Ok(dir);
    }
    if let Some(dir) = env("XDG_CONFIG_HOME").filter(|d| d.is_absolute()) {
        return Ok(dir.join("human-plus"));
    }
    if cfg!(windows)
        && let Some(dir) = env("APPDATA")
    {
        return Ok(dir.join("human-plus"));
    }
    if let Some(home) = env("HOME") {
        return Ok(home.join(".config").join("human-plus"));
    }
    Err(Failure::usage("cannot find a configuration directory")
        .with_hint(format!("set {CONFIG_DIR_ENV} or HOME")))
}

/// The directory of profile `name`.
///
/// # Errors
/// A usage failure for a malformed name, or as [`config_dir`].
pub fn profile_dir(name: &str) -> Result<PathBuf, Failure> {
    if !is_valid_profile_name(name) {
        return Err(Failure::usage(format!(
            "profile name [{}] must be 1 to 64 letters, digits, '_' or '-'",
            crate::output::exit::printable(name)
        )));
    }
    Ok(config_dir()?.join("profiles").join(name))
}

/// A profile read from its directory.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Its directory.
    pub dir: PathBuf,
    /// `profile.json`.
    pub profile: Profile,
    /// `pins.json`, when it exists.
    pub pins: Option<BTreeMap<String, String>>,
    /// `reviewed.json`, when it exists: the definitions the person
    /// reviewed (with `join` or `review`), in the surface's order.
    pub reviewed: Option<Vec<ToolDefinition>>,
}

/// `reviewed.json`: the definitions a person reviewed, as the surface
/// listed them (name, description, input schema: what a digest covers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reviewed {
    /// The document's version, [`REVIEWED_VERSION`].
    pub version: u32,
    /// The definitions.
    pub tools: Vec<ToolDefinition>,
}

/// The version of `reviewed.json`.
pub const REVIEWED_VERSION: u32 = 1;

/// The lock file inside a profile directory: whoever writes the profile's
/// files holds it exclusively, whoever reads them holds it shared, so a
/// reader never sees half of a change (`join` or `review` writing trust,
/// pins and reviewed definitions together).
pub const LOCK_FILE: &str = ".lock";

/// A profile directory's lock, held while this lives (released on drop).
/// A no-op on systems without `flock`.
#[derive(Debug)]
pub struct ProfileLock {
    #[cfg(unix)]
    _file: std::fs::File,
}

impl ProfileLock {
    /// Waits for the lock of the profile directory `dir`: `exclusive` to
    /// write, shared to read.
    ///
    /// # Errors
    /// A failure naming the lock file when it cannot be opened or locked.
    pub fn take(dir: &Path, exclusive: bool) -> Result<ProfileLock, Failure> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            let path = dir.join(LOCK_FILE);
            let fail = |e: &dyn std::fmt::Display| {
                Failure::internal(format!("cannot lock {}: {e}", path.display()))
            };
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)
                .map_err(|e| fail(&e))?;
            let how = if exclusive {
                rustix::fs::FlockOperation::LockExclusive
            } else {
                rustix::fs::FlockOperation::LockShared
            };
            rustix::fs::flock(&file, how).map_err(|e| fail(&e))?;
            Ok(ProfileLock { _file: file })
        }
        #[cfg(not(unix))]
        {
            let _ = (dir, exclusive);
            Ok(ProfileLock {})
        }
    }
}

/// What a profile's files look like on disk (size, modification time and
/// file identity of each), to notice that `join` or `review` changed them
/// without reading them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fingerprint(Vec<Option<(u64, Option<std::time::SystemTime>, u64)>>);

impl Fingerprint {
    /// The fingerprint of the profile in `dir` now.
    #[must_use]
    pub fn of(dir: &Path) -> Fingerprint {
        Fingerprint(
            [PROFILE_FILE, TOKEN_FILE, PINS_FILE, REVIEWED_FILE]
                .iter()
                .map(|name| {
                    let meta = std::fs::metadata(dir.join(name)).ok()?;
                    #[cfg(unix)]
                    let identity = std::os::unix::fs::MetadataExt::ino(&meta);
                    #[cfg(not(unix))]
                    let identity = 0;
                    Some((meta.len(), meta.modified().ok(), identity))
                })
                .collect(),
        )
    }
}

impl Loaded {
    /// The token file's path.
    #[must_use]
    pub fn token_path(&self) -> PathBuf {
        self.dir.join(TOKEN_FILE)
    }
}

/// Reads profile `name` (not its token: [`read_token`]): its directory,
/// `profile.json` and `pins.json` are each refused when others can change
/// them ([`check_profile_path`]), and so is `reviewed.json` when it exists.
///
/// # Errors
/// A usage failure when it does not exist, cannot be read, or others can
/// change it.
pub fn load(name: &str) -> Result<Loaded, Failure> {
    let dir = profile_dir(name)?;
    let file = dir.join(PROFILE_FILE);
    if let Err(e) = std::fs::metadata(&file) {
        return Err(Failure::usage(format!(
            "cannot read profile {name} ({}): {e}",
            file.display()
        ))
        .with_hint(
            "`human-plus join --name NAME` writes a profile from the link a person shared",
        ));
    }
    check_profile_path(&dir, PathKind::Directory)?;
    let lock = ProfileLock::take(&dir, false)?;
    load_holding(name, &lock)
}

/// Reads profile `name` while the caller holds its lock (shared, or
/// exclusive to write what it read back): [`load`] without taking it.
///
/// # Errors
/// As [`load`].
pub fn load_holding(name: &str, _lock: &ProfileLock) -> Result<Loaded, Failure> {
    let dir = profile_dir(name)?;
    let file = dir.join(PROFILE_FILE);
    let text = read_profile_file(&file)?;
    let profile: Profile = serde_json::from_str(&text)
        .map_err(|e| Failure::usage(format!("profile {name} ({}): {e}", file.display())))?;
    if profile.version != PROFILE_VERSION {
        return Err(Failure::usage(format!(
            "profile {name} has version {}, this human-plus reads version {PROFILE_VERSION}",
            profile.version
        )));
    }
    let pins_path = dir.join(PINS_FILE);
    let pins = if pins_path.exists() {
        let text = read_profile_file(&pins_path)?;
        Some(crate::profiles::pins::pins_from_text(&text, &pins_path)?)
    } else {
        None
    };
    let reviewed_path = dir.join(REVIEWED_FILE);
    let reviewed = if reviewed_path.exists() {
        let text = read_profile_file(&reviewed_path)?;
        let doc: Reviewed = serde_json::from_str(&text).map_err(|e| {
            Failure::usage(format!("profile {name} ({}): {e}", reviewed_path.display()))
        })?;
        if doc.version != REVIEWED_VERSION {
            return Err(Failure::usage(format!(
                "profile {name}'s {REVIEWED_FILE} has version {}, this human-plus reads version {REVIEWED_VERSION}",
                doc.version
            )));
        }
        Some(doc.tools)
    } else {
        None
    };
    Ok(Loaded {
        dir,
        profile,
        pins,
        reviewed,
    })
}

/// What a profile path is, for the permission it must have and the hint
/// that restores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// The profile's directory: nobody but its owner may write it
    /// (`chmod 700`, as `join` creates it).
    Directory,
    /// `profile.json`, `pins.json`, `reviewed.json`: nobody but its owner
    /// may write it (`chmod 600`, as `join` writes it).
    File,
    /// The token file: nobody but its owner may read or write it
    /// (`chmod 600`).
    Token,
}

/// Checks that a profile's directory or file can be changed by the user
/// only: it belongs to the user (or root), and the group and others cannot
/// write it ([`profile_file_mode_is_safe`]); for the token file, cannot
/// read it either ([`token_file_mode_is_private`]). Not checked on systems
/// without Unix modes.
///
/// # Errors
/// A usage failure naming the path, with the `chmod` (or `chown`) that
/// makes it safe; also when its metadata cannot be read.
pub fn check_profile_path(path: &Path, kind: PathKind) -> Result<(), Failure> {
    let what = match kind {
        PathKind::Directory => "directory",
        PathKind::File => "file",
        PathKind::Token => "token file",
    };
    let meta = std::fs::metadata(path).map_err(|e| {
        Failure::usage(format!(
            "cannot read the profile's {what} {}: {e}",
            path.display()
        ))
    })?;
    let Some((mode, owner, user)) = unix_mode_and_owner(&meta) else {
        return Ok(());
    };
    if !profile_file_owner_is_safe(owner, user) {
        return Err(Failure::usage(format!(
            "the profile's {what} {} belongs to another user; it is not used",
            path.display()
        ))
        .with_hint(format!(
            "it must belong to you (or root): chown \"$(id -un)\" {}",
            path.display()
        )));
    }
    let (safe, verb, chmod) = match kind {
        PathKind::Directory => (profile_file_mode_is_safe(mode), "writable", "700"),
        PathKind::File => (profile_file_mode_is_safe(mode), "writable", "600"),
        PathKind::Token => (token_file_mode_is_private(mode), "accessible", "600"),
    };
    if !safe {
        return Err(Failure::usage(format!(
            "the profile's {what} {} is {verb} by others (mode {:04o}); it is not used",
            path.display(),
            mode & 0o7777
        ))
        .with_hint(format!("chmod {chmod} {}", path.display())));
    }
    Ok(())
}

/// Reads one of a profile's files (`profile.json`, `pins.json`,
/// `reviewed.json`) as text, refusing it when others can change it
/// ([`check_profile_path`]). The one way a profile's file is read.
///
/// # Errors
/// A usage failure naming the file when others can change it or it cannot
/// be read.
pub fn read_profile_file(path: &Path) -> Result<String, Failure> {
    check_profile_path(path, PathKind::File)?;
    std::fs::read_to_string(path).map_err(|e| {
        Failure::usage(format!(
            "cannot read the profile's file {}: {e}",
            path.display()
        ))
    })
}

/// Reads a profile's token file, refusing one whose permissions let the
/// group or others read or write it (ssh's rule for a private key), or
/// that belongs to another user.
///
/// # Errors
/// A usage failure when it cannot be read, is not private, or is empty.
pub fn read_token(path: &Path) -> Result<String, Failure> {
    check_profile_path(path, PathKind::Token)?;
    crate::profiles::token::read_token(Some(path))
}

/// Refuses to write profile `name` into a directory that already exists
/// and that others can change (`join` checks it before anything is sent).
///
/// # Errors
/// As [`check_profile_path`].
pub fn check_existing_dir(dir: &Path) -> Result<(), Failure> {
    if dir.exists() {
        check_profile_path(dir, PathKind::Directory)?;
    }
    Ok(())
}

/// The permission bits, the owner and the current user.
#[cfg(unix)]
fn unix_mode_and_owner(meta: &std::fs::Metadata) -> Option<(u32, u32, u32)> {
    use std::os::unix::fs::MetadataExt as _;
    Some((meta.mode(), meta.uid(), rustix::process::getuid().as_raw()))
}

#[cfg(not(unix))]
fn unix_mode_and_owner(_meta: &std::fs::Metadata) -> Option<(u32, u32, u32)> {
    None
}

/// Writes `contents` to `path` atomically: a temporary file in the same
/// directory (created with `mode` on Unix), flushed to disk, renamed over
/// `path`.
///
/// # Errors
/// The I/O error, as a failure naming the file.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), Failure> {
    let fail =
        |e: std::io::Error| Failure::internal(format!("cannot write {}: {e}", path.display()));
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{file_name}.human-plus-{}-{}.tmp",
        std::process::id(),
        crate::profiles::random::random_hex(4)
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let written = (|| {
        let mut f = options.open(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}

/// Creates `dir` (and its parents) readable by the user only.
///
/// # Errors
/// The I/O error, as a failure naming the directory.
pub fn create_private_dir(dir: &Path) -> Result<(), Failure> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|e| Failure::internal(format!("cannot create {}: {e}", dir.display())))
}

/// Saves profile `name`: `profile.json`, `token` (0600), `pins.json` and
/// `reviewed.json` (a stale one removed when `None`), under the profile's
/// lock held exclusively. Returns its directory.
///
/// # Errors
/// A failure naming the file that could not be written.
pub fn save(
    name: &str,
    profile: &Profile,
    token: &str,
    pins: Option<&BTreeMap<String, String>>,
    reviewed: Option<&[ToolDefinition]>,
) -> Result<PathBuf, Failure> {
    let dir = profile_dir(name)?;
    create_private_dir(&dir)?;
    let _lock = ProfileLock::take(&dir, true)?;
    write_atomic(
        &dir.join(TOKEN_FILE),
        format!("{token}\n").as_bytes(),
        0o600,
    )?;
    write_trust(&dir, profile, pins, reviewed)?;
    Ok(dir)
}

/// Writes a profile's `profile.json`, `pins.json` and `reviewed.json`
/// (removing a stale one given as `None`); the caller holds the profile's
/// lock exclusively ([`ProfileLock`]), so a reader sees all of it or none.
///
/// # Errors
/// A failure naming the file that could not be written.
pub fn write_trust(
    dir: &Path,
    profile: &Profile,
    pins: Option<&BTreeMap<String, String>>,
    reviewed: Option<&[ToolDefinition]>,
) -> Result<(), Failure> {
    write_or_remove(
        &dir.join(PINS_FILE),
        pins.map(|p| encode("pins", p)).transpose()?,
    )?;
    let reviewed = reviewed.map(|tools| Reviewed {
        version: REVIEWED_VERSION,
        tools: tools.to_vec(),
    });
    write_or_remove(
        &dir.join(REVIEWED_FILE),
        reviewed
            .as_ref()
            .map(|r| encode("reviewed definitions", r))
            .transpose()?,
    )?;
    // The profile last: its allowlist names what the two files above cover.
    write_atomic(
        &dir.join(PROFILE_FILE),
        encode("profile", profile)?.as_bytes(),
        0o600,
    )
}

fn write_or_remove(path: &Path, text: Option<String>) -> Result<(), Failure> {
    match text {
        Some(text) => write_atomic(path, text.as_bytes(), 0o600),
        None if path.exists() => std::fs::remove_file(path)
            .map_err(|e| Failure::internal(format!("cannot remove {}: {e}", path.display()))),
        None => Ok(()),
    }
}

/// `value` as pretty JSON ending in a newline.
fn encode<T: Serialize + ?Sized>(what: &str, value: &T) -> Result<String, Failure> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::internal(format!("cannot encode the {what}: {e}")))?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_profile() {
        let profile = ProfileEgress {
            allow_host: vec!["relay.example".into()],
            allow_port: vec![8443],
            egress_proxy: Some("http://proxy:3128".into()),
            allow_unverified_egress: false,
            auth: Some("bearer".into()),
            ..ProfileEgress::default()
        };
        let none = EgressArgs::default();
        let merged = profile.under(&none).unwrap();
        assert_eq!(merged.allow_host, ["relay.example"]);
        assert_eq!(merged.allow_port, [8443]);
        assert_eq!(merged.auth, Some(AuthMode::Bearer));
        let flags = EgressArgs {
            allow_port: vec![443],
            egress_proxy: Some("http://other:3128".into()),
            auth: Some(AuthMode::Query),
            ..EgressArgs::default()
        };
        let merged = profile.under(&flags).unwrap();
        assert_eq!(merged.allow_host, ["relay.example"]);
        assert_eq!(merged.allow_port, [443]);
        assert_eq!(merged.egress_proxy.as_deref(), Some("http://other:3128"));
        assert_eq!(merged.auth, Some(AuthMode::Query));
        let odd = ProfileEgress {
            auth: Some("cookie".into()),
            ..ProfileEgress::default()
        };
        assert!(odd.under(&none).is_err());
    }
}
