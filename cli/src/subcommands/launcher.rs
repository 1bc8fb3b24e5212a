//! How an MCP client should start the bridge: the command `join` prints
//! and writes (`--write-config`) for a profile.
//!
//! A client started from the desktop (Claude Desktop, Cursor, VS Code)
//! does not read the person's shell profile: its `PATH` is the system's
//! (`/usr/bin:/bin` on macOS), so a bare `human-plus`, `uvx` or `npx`
//! fails with `spawn … ENOENT`. Every entry therefore names its program by
//! an absolute path when one can be found.
//!
//! Which program depends on how this `human-plus` was started:
//!
//! * **installed** (`cargo install`, `cargo binstall`, a release archive,
//!   `pip`/`pipx install`, `uv tool install`, `npm install`): this binary,
//!   by the path it was found under on `PATH` when that is the same file
//!   (so a symbolic link such as pipx's `~/.local/bin/human-plus` survives
//!   an upgrade), else by its own path;
//! * **`uvx human-plus`**: the binary lives in uv's cache, which
//!   `uv cache clean` empties, so the entry runs `uvx human-plus@VERSION`
//!   (the `uvx` beside the `uv` that started it, which uv names in `UV`);
//! * **`pipx run human-plus`**: the same, in pipx's cache
//!   (`pipx run --spec human-plus==VERSION human-plus`);
//! * **`npx human-plus`**: the binary lives in npm's `_npx` cache, so the
//!   entry runs `npx --prefer-offline -y human-plus@VERSION` (the `npx`
//!   beside the `node` that ran it). `npx` is a Node.js script that finds `node` through
//!   `PATH`, so when `node` is not in `/usr/bin` or `/bin` the entry also
//!   sets `PATH` with `node`'s directory first.
//!
//! The launcher's line names this version: the version that wrote the
//! profile is the one that serves it, and running `join` again with a
//! newer version moves the entry to it. A cached version then starts
//! without asking the index: uvx does so by itself; npx asks the registry
//! at every start (and waits out its retries, about 70 s, when the
//! registry cannot be reached) unless told `--prefer-offline`, which still
//! fetches what its cache lacks.
//!
//! A cache is recognised by its tag (`CACHEDIR.TAG`, which uv, pipx and
//! cargo write at their cache's root; a virtual environment's own tag does
//! not count) or, for npm, by `_npx` in the path.
//! A binary in a tagged cache that no launcher claims (cargo's `target/`
//! directory, from `cargo run`) is named by its path, and `join` says it
//! may go away.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The package and command name every launcher runs.
const PACKAGE: &str = "human-plus";

/// Directories on the `PATH` of every client started from the desktop.
const SYSTEM_DIRS: [&str; 2] = ["/usr/bin", "/bin"];

/// The `PATH` tail an npx entry sets after `node`'s directory.
const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What started this `human-plus`, as far as an MCP client entry is
/// concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Launcher {
    /// An installation that stays: the entry names the binary.
    Installed,
    /// `uvx human-plus` (uv's `tool run`), from uv's cache.
    Uvx,
    /// `pipx run human-plus`, from pipx's cache.
    PipxRun,
    /// `npx human-plus`, from npm's `_npx` cache.
    Npx,
}

/// What [`BridgeCommand::detect`] reads: where this binary is and what the
/// process that started it left in the environment.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// This binary's path (`std::env::current_exe`).
    pub exe: PathBuf,
    /// The name it was started under (`argv[0]`).
    pub argv0: Option<OsString>,
    /// `UV`: the `uv` binary that started this process (uv 0.6 and later
    /// set it for every process they start).
    pub uv: Option<PathBuf>,
    /// `npm_node_execpath`: the `node` that runs `npx` (npm sets it for
    /// the commands it runs).
    pub node: Option<PathBuf>,
    /// `PATH`.
    pub path: Option<OsString>,
    /// The version a launcher's line names (this binary's); empty: none.
    pub version: String,
}

impl Facts {
    /// The facts of the running process.
    #[must_use]
    pub fn current() -> Facts {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        Facts {
            exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from(PACKAGE)),
            argv0: std::env::args_os().next(),
            uv: var("UV").map(PathBuf::from),
            node: var("npm_node_execpath").map(PathBuf::from),
            path: var("PATH"),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

/// The command line an MCP client runs to start the bridge of a profile:
/// `program prefix… mcp --profile NAME`, with `env` set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeCommand {
    /// How this `human-plus` was started.
    pub launcher: Launcher,
    /// The program to run, by its absolute path when it was found.
    pub program: String,
    /// The arguments before `mcp --profile NAME` (`["--prefer-offline",
    /// "-y", "human-plus@VERSION"]` for npx).
    pub prefix: Vec<String>,
    /// Environment the entry sets (`PATH` for npx when `node` is outside
    /// the system's directories).
    pub env: Vec<(String, String)>,
    /// The cache directory this binary runs from when no launcher claims
    /// it (cargo's `target/`): the entry names a file that may go away.
    pub cache: Option<PathBuf>,
}

impl BridgeCommand {
    /// The command for the running process.
    #[must_use]
    pub fn current() -> BridgeCommand {
        BridgeCommand::detect(&Facts::current())
    }

    /// The command for a process with these facts (see the module's
    /// documentation for the rules).
    #[must_use]
    pub fn detect(facts: &Facts) -> BridgeCommand {
        let exe = std::fs::canonicalize(&facts.exe).unwrap_or_else(|_| facts.exe.clone());
        let path = facts.path.as_deref();
        if in_npx_cache(&exe) {
            let node = facts
                .node
                .clone()
                .or_else(|| find_on_path("node", path))
                .and_then(|n| n.parent().map(Path::to_path_buf));
            let npx_name = if cfg!(windows) { "npx.cmd" } else { "npx" };
            let program = node
                .as_ref()
                .map(|dir| dir.join(npx_name))
                .filter(|p| p.is_file())
                .or_else(|| find_on_path(npx_name, path))
                .map_or_else(|| "npx".to_owned(), |p| display(&p));
            let mut env = Vec::new();
            if let Some(dir) = node.filter(|_| cfg!(unix)) {
                let dir = display(&dir);
                if !SYSTEM_DIRS.contains(&dir.as_str()) {
                    env.push(("PATH".to_owned(), format!("{dir}:{SYSTEM_PATH}")));
                }
            }
            return BridgeCommand {
                launcher: Launcher::Npx,
                program,
                prefix: vec![
                    "--prefer-offline".to_owned(),
                    "-y".to_owned(),
                    spec(&facts.version, "@"),
                ],
                env,
                cache: None,
            };
        }
        let cache = tagged_cache(&exe);
        if let Some(dir) = &cache {
            if dir.components().any(|c| c.as_os_str() == "pipx") {
                return BridgeCommand {
                    launcher: Launcher::PipxRun,
                    program: find_on_path(&exe_name("pipx"), path)
                        .map_or_else(|| "pipx".to_owned(), |p| display(&p)),
                    prefix: if facts.version.is_empty() {
                        vec!["run".to_owned(), PACKAGE.to_owned()]
                    } else {
                        vec![
                            "run".to_owned(),
                            "--spec".to_owned(),
                            spec(&python_version(&facts.version), "=="),
                            PACKAGE.to_owned(),
                        ]
                    },
                    env: Vec::new(),
                    cache: None,
                };
            }
            if facts.uv.is_some() || dir.file_name() == Some(OsStr::new("uv")) {
                let uv_spec = spec(&python_version(&facts.version), "@");
                let uvx = facts
                    .uv
                    .as_ref()
                    .and_then(|uv| uv.parent())
                    .map(|d| d.join(exe_name("uvx")))
                    .filter(|p| p.is_file())
                    .or_else(|| find_on_path(&exe_name("uvx"), path));
                let (program, prefix) = match (uvx, &facts.uv) {
                    (Some(uvx), _) => (display(&uvx), vec![uv_spec]),
                    // A uv without its uvx: `uv tool run` is the same.
                    (None, Some(uv)) => (
                        display(uv),
                        vec!["tool".to_owned(), "run".to_owned(), uv_spec],
                    ),
                    (None, None) => ("uvx".to_owned(), vec![uv_spec]),
                };
                return BridgeCommand {
                    launcher: Launcher::Uvx,
                    program,
                    prefix,
                    env: Vec::new(),
                    cache: None,
                };
            }
        }
        BridgeCommand {
            launcher: Launcher::Installed,
            program: display(&public_path(&exe, facts.argv0.as_deref(), path)),
            prefix: Vec::new(),
            env: Vec::new(),
            cache,
        }
    }

    /// The entry's arguments for profile `name`: the prefix, then
    /// `mcp --profile NAME`.
    #[must_use]
    pub fn args(&self, name: &str) -> Vec<String> {
        let mut args = self.prefix.clone();
        args.extend(["mcp".to_owned(), "--profile".to_owned(), name.to_owned()]);
        args
    }

    /// The command line for a shell (`claude mcp add … -- LINE`), each
    /// word quoted when it needs to be.
    #[must_use]
    pub fn shell_line(&self, name: &str) -> String {
        let mut words = vec![shell_quote(&self.program)];
        words.extend(self.args(name).iter().map(|a| shell_quote(a)));
        words.join(" ")
    }

    /// What `join` says about the entries: which program they run and why.
    #[must_use]
    pub fn note(&self) -> String {
        let mut out = String::new();
        match self.launcher {
            Launcher::Installed => {
                let _ = write!(
                    out,
                    "The entries start {} by its full path (an MCP client started from the desktop may not have its directory on PATH).",
                    self.program
                );
                if let Some(cache) = &self.cache {
                    let _ = write!(
                        out,
                        " It runs from {}, a cache directory: if that is cleaned, install human-plus and run join again.",
                        cache.display()
                    );
                }
            }
            Launcher::Uvx => {
                let _ = write!(
                    out,
                    "This human-plus runs from uv's cache, which `uv cache clean` empties: the entries start it with uvx ({}).",
                    self.program
                );
            }
            Launcher::PipxRun => {
                let _ = write!(
                    out,
                    "This human-plus runs from pipx's cache, which pipx empties after a while: the entries start it with `pipx run` ({}).",
                    self.program
                );
            }
            Launcher::Npx => {
                let _ = write!(
                    out,
                    "This human-plus runs from npm's npx cache, which can be cleaned: the entries start it with npx ({}){}.",
                    self.program,
                    if self.env.is_empty() {
                        ""
                    } else {
                        ", with PATH set so that npx finds node"
                    }
                );
            }
        }
        out
    }
}

/// `human-plus`, or `human-plus` SEPARATOR `version` when there is one.
fn spec(version: &str, separator: &str) -> String {
    if version.is_empty() {
        PACKAGE.to_owned()
    } else {
        format!("{PACKAGE}{separator}{version}")
    }
}

/// A crate version as the Python package spells it (PEP 440, as maturin
/// writes it): `1.2.0-alpha.1` is `1.2.0a1`, `-beta.N` `bN`, `-rc.N`
/// `rcN`; any other version as it is.
fn python_version(version: &str) -> String {
    let Some((release, pre)) = version.split_once('-') else {
        return version.to_owned();
    };
    let (kind, n) = pre.split_once('.').unwrap_or((pre, "0"));
    let short = match kind {
        "alpha" | "a" => "a",
        "beta" | "b" => "b",
        "rc" => "rc",
        _ => return version.to_owned(),
    };
    format!("{release}{short}{n}")
}

/// `name` with the platform's executable suffix.
fn exe_name(name: &str) -> String {
    format!("{name}{}", std::env::consts::EXE_SUFFIX)
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// Whether `exe` is inside npm's npx cache (`<npm cache>/_npx/<hash>/…`).
fn in_npx_cache(exe: &Path) -> bool {
    exe.components().any(|c| c.as_os_str() == "_npx")
}

/// The nearest directory above `exe` holding a cache directory tag, a
/// virtual environment's own tag aside (uv tags the environments it makes,
/// `uv tool install`'s and a project's `.venv` among them, and those stay;
/// what makes uvx's and `pipx run`'s environments passing is the cache
/// they sit in).
fn tagged_cache(exe: &Path) -> Option<PathBuf> {
    exe.ancestors()
        .skip(1)
        .find(|dir| !dir.join("pyvenv.cfg").is_file() && is_cache_tag(&dir.join("CACHEDIR.TAG")))
        .map(Path::to_path_buf)
}

/// Whether `file` starts with the cache directory tag's signature
/// (<https://bford.info/cachedir/>).
fn is_cache_tag(file: &Path) -> bool {
    const SIGNATURE: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55";
    let mut head = [0u8; SIGNATURE.len()];
    std::fs::File::open(file)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok_and(|()| head == SIGNATURE)
}

/// The first `name` on `path` that is a file.
fn find_on_path(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The path to name `exe` by: where `argv0` was found on `PATH` when that
/// is the same file (a symbolic link keeps its name across upgrades),
/// else `exe` itself.
fn public_path(exe: &Path, argv0: Option<&OsStr>, path: Option<&OsStr>) -> PathBuf {
    let Some(name) = argv0.map(Path::new) else {
        return exe.to_path_buf();
    };
    if name.components().count() != 1 {
        return exe.to_path_buf();
    }
    let found = find_on_path(&name.to_string_lossy(), path)
        .or_else(|| find_on_path(&exe_name(&name.to_string_lossy()), path));
    match found {
        Some(p) if std::fs::canonicalize(&p).is_ok_and(|c| c == exe) => p,
        _ => exe.to_path_buf(),
    }
}

/// `word` quoted for a POSIX shell when it holds anything but letters,
/// digits and `_ - . / : = @ % + ,`.
#[must_use]
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const TAG: &str = "Signature: 8a477f597d28d172789f06886806bc55\n# a cache\n";

    /// A scratch directory holding `files` (relative paths; a path ending
    /// in `CACHEDIR.TAG` gets the tag, any other an empty file).
    fn tree(files: &[&str]) -> PathBuf {
        let root = std::env::temp_dir().join(format!(
            "human-plus-launcher-{}",
            crate::demo::random_hex(6)
        ));
        for f in files {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let text = if f.ends_with("CACHEDIR.TAG") { TAG } else { "" };
            std::fs::write(&p, text).unwrap();
        }
        std::fs::canonicalize(root).unwrap()
    }

    fn path_of(dirs: &[PathBuf]) -> Option<OsString> {
        Some(std::env::join_paths(dirs).unwrap())
    }

    #[test]
    fn uvx_runs_from_uvs_cache_and_the_entry_names_the_uvx_beside_uv() {
        let root = tree(&[
            "cache/uv/CACHEDIR.TAG",
            "cache/uv/archive-v0/abc/pyvenv.cfg",
            "cache/uv/archive-v0/abc/bin/human-plus",
            "tools/bin/uv",
            "tools/bin/uvx",
        ]);
        let facts = Facts {
            exe: root.join("cache/uv/archive-v0/abc/bin/human-plus"),
            argv0: Some("human-plus".into()),
            uv: Some(root.join("tools/bin/uv")),
            node: None,
            path: path_of(&[root.join("cache/uv/archive-v0/abc/bin")]),
            version: "0.1.0".into(),
        };
        let cmd = BridgeCommand::detect(&facts);
        assert_eq!(cmd.launcher, Launcher::Uvx);
        assert_eq!(cmd.program, display(&root.join("tools/bin/uvx")));
        assert_eq!(
            cmd.args("board"),
            ["human-plus@0.1.0", "mcp", "--profile", "board"]
        );
        assert!(cmd.env.is_empty());
        assert!(cmd.note().contains("uv cache clean"), "{}", cmd.note());
        // A uv without a uvx beside it: `uv tool run`.
        std::fs::remove_file(root.join("tools/bin/uvx")).unwrap();
        let cmd = BridgeCommand::detect(&facts);
        assert_eq!(cmd.program, display(&root.join("tools/bin/uv")));
        assert_eq!(cmd.prefix, ["tool", "run", "human-plus@0.1.0"]);
        // No UV (an older uv), but the tagged cache is uv's: uvx from PATH.
        let facts = Facts {
            uv: None,
            path: path_of(&[root.join("elsewhere"), root.join("bin2")]),
            ..facts
        };
        let cmd = BridgeCommand::detect(&facts);
        assert_eq!((cmd.launcher, cmd.program.as_str()), (Launcher::Uvx, "uvx"));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn pipx_run_is_recognised_by_pipxs_tagged_cache() {
        let root = tree(&[
            "home/.cache/pipx/CACHEDIR.TAG",
            "home/.cache/pipx/6502715ce6f91df/CACHEDIR.TAG",
            "home/.cache/pipx/6502715ce6f91df/pyvenv.cfg",
            "home/.cache/pipx/6502715ce6f91df/bin/human-plus",
            "home/.local/bin/pipx",
        ]);
        let facts = Facts {
            exe: root.join("home/.cache/pipx/6502715ce6f91df/bin/human-plus"),
            // pipx run started by uv run: UV set, still pipx's cache.
            uv: Some(root.join("nowhere/uv")),
            path: path_of(&[root.join("home/.local/bin")]),
            version: "0.2.0-beta.1".into(),
            ..Facts::default()
        };
        let cmd = BridgeCommand::detect(&facts);
        assert_eq!(cmd.launcher, Launcher::PipxRun);
        assert_eq!(cmd.program, display(&root.join("home/.local/bin/pipx")));
        assert_eq!(
            cmd.prefix,
            ["run", "--spec", "human-plus==0.2.0b1", "human-plus"]
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn npx_names_the_npx_beside_node_and_puts_nodes_directory_on_path() {
        let root = tree(&[
            "home/.npm/_npx/b057ff0d/node_modules/@human-plus/linux-x64/bin/human-plus",
            "nvm/versions/node/v22.1.0/bin/node",
            "nvm/versions/node/v22.1.0/bin/npx",
        ]);
        let node_dir = root.join("nvm/versions/node/v22.1.0/bin");
        let facts = Facts {
            exe: root
                .join("home/.npm/_npx/b057ff0d/node_modules/@human-plus/linux-x64/bin/human-plus"),
            argv0: Some("human-plus".into()),
            uv: None,
            node: Some(node_dir.join("node")),
            path: path_of(&[root.join("home/.npm/_npx/b057ff0d/node_modules/.bin")]),
            version: "0.1.0".into(),
        };
        let cmd = BridgeCommand::detect(&facts);
        assert_eq!(cmd.launcher, Launcher::Npx);
        assert_eq!(cmd.program, display(&node_dir.join("npx")));
        assert_eq!(
            cmd.args("board"),
            [
                "--prefer-offline",
                "-y",
                "human-plus@0.1.0",
                "mcp",
                "--profile",
                "board"
            ]
        );
        assert_eq!(
            cmd.env,
            [(
                "PATH".to_owned(),
                format!("{}:/usr/local/bin:/usr/bin:/bin", node_dir.display())
            )]
        );
        assert!(cmd.note().contains("finds node"), "{}", cmd.note());
        // node in /usr/bin (Debian's): no PATH in the entry.
        let facts = Facts {
            node: Some(PathBuf::from("/usr/bin/node")),
            ..facts
        };
        let cmd = BridgeCommand::detect(&facts);
        assert!(cmd.env.is_empty(), "{cmd:?}");
        assert_eq!(cmd.launcher, Launcher::Npx);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn an_installed_binary_is_named_by_the_link_on_path_when_it_is_the_same_file() {
        let root = tree(&["venvs/human-plus/bin/human-plus", "other/human-plus"]);
        let exe = root.join("venvs/human-plus/bin/human-plus");
        std::fs::create_dir_all(root.join("local/bin")).unwrap();
        std::os::unix::fs::symlink(&exe, root.join("local/bin/human-plus")).unwrap();
        let facts = Facts {
            exe: exe.clone(),
            argv0: Some("human-plus".into()),
            path: path_of(&[root.join("local/bin")]),
            ..Facts::default()
        };
        let cmd = BridgeCommand::detect(&facts);
        assert_eq!(cmd.launcher, Launcher::Installed);
        assert_eq!(cmd.program, display(&root.join("local/bin/human-plus")));
        assert_eq!(cmd.args("b"), ["mcp", "--profile", "b"]);
        assert_eq!(cmd.cache, None);
        // Another human-plus first on PATH: this binary's own path.
        let facts = Facts {
            path: path_of(&[root.join("other"), root.join("local/bin")]),
            ..facts
        };
        assert_eq!(BridgeCommand::detect(&facts).program, display(&exe));
        // Started by a path: that binary.
        let facts = Facts {
            argv0: Some(exe.clone().into_os_string()),
            ..facts
        };
        assert_eq!(BridgeCommand::detect(&facts).program, display(&exe));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn an_environment_uv_tagged_is_an_installation() {
        // `uv tool install human-plus`, run through `uv run` (UV set): the
        // environment's own tag is not a cache's.
        let root = tree(&[
            "share/uv/tools/human-plus/CACHEDIR.TAG",
            "share/uv/tools/human-plus/pyvenv.cfg",
            "share/uv/tools/human-plus/bin/human-plus",
        ]);
        let exe = root.join("share/uv/tools/human-plus/bin/human-plus");
        let facts = Facts {
            exe: exe.clone(),
            uv: Some(root.join("bin/uv")),
            ..Facts::default()
        };
        let cmd = BridgeCommand::detect(&facts);
        assert_eq!(cmd.launcher, Launcher::Installed);
        assert_eq!((cmd.program, cmd.cache), (display(&exe), None));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_binary_in_a_cache_no_launcher_claims_is_named_with_a_warning() {
        let root = tree(&["target/CACHEDIR.TAG", "target/debug/human-plus"]);
        let facts = Facts {
            exe: root.join("target/debug/human-plus"),
            argv0: Some(root.join("target/debug/human-plus").into_os_string()),
            ..Facts::default()
        };
        let cmd = BridgeCommand::detect(&facts);
        assert_eq!(cmd.launcher, Launcher::Installed);
        assert_eq!(cmd.program, display(&root.join("target/debug/human-plus")));
        assert_eq!(cmd.cache.as_deref(), Some(root.join("target").as_path()));
        assert!(cmd.note().contains("a cache directory"), "{}", cmd.note());
        // A file named CACHEDIR.TAG without the signature is no tag.
        std::fs::write(root.join("target/CACHEDIR.TAG"), "hello").unwrap();
        assert_eq!(BridgeCommand::detect(&facts).cache, None);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn versions_as_the_python_package_spells_them() {
        assert_eq!(python_version("0.1.0"), "0.1.0");
        assert_eq!(python_version("1.2.0-alpha.1"), "1.2.0a1");
        assert_eq!(python_version("1.2.0-beta.3"), "1.2.0b3");
        assert_eq!(python_version("1.2.0-rc.2"), "1.2.0rc2");
        assert_eq!(python_version("1.2.0-rc"), "1.2.0rc0");
        assert_eq!(python_version("1.2.0-dev.5"), "1.2.0-dev.5");
        assert_eq!(spec("", "@"), "human-plus");
        assert_eq!(spec("0.1.0", "=="), "human-plus==0.1.0");
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_quote("/usr/bin/npx"), "/usr/bin/npx");
        assert_eq!(
            shell_quote("HUMAN_PLUS_CONFIG_DIR=/a/b"),
            "HUMAN_PLUS_CONFIG_DIR=/a/b"
        );
        assert_eq!(
            shell_quote("/Users/a b/Library/human-plus"),
            "'/Users/a b/Library/human-plus'"
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        let cmd = BridgeCommand {
            launcher: Launcher::Installed,
            program: "/opt/my tools/human-plus".into(),
            prefix: Vec::new(),
            env: Vec::new(),
            cache: None,
        };
        assert_eq!(
            cmd.shell_line("board"),
            "'/opt/my tools/human-plus' mcp --profile board"
        );
    }
}
