//! Property-based fuzzing of every parser that takes outside input: the shell parser and
//! policy, workspace paths, stored-object decoding, the policy TOML, the session socket's
//! JSON, and the numeric option parsers. cargo-fuzz needs a nightly toolchain, which this
//! machine cannot install, so these are proptest generators (random bytes, grammar-shaped
//! text, mutations of valid inputs). The property for each: no panic, and bad input is a
//! typed error. `AVFS_FUZZ_CASES` raises the case count for a long run
//! (`AVFS_FUZZ_CASES=200000 cargo test --release --test fuzz_props`).

use agentvfs::model::limits;
use agentvfs::model::node::{kind, references};
use agentvfs::model::path::VPath;
use agentvfs::service::policy::{CommandRequest, PolicyEngine};
use agentvfs::service::session::Request;
use proptest::prelude::*;
use proptest::test_runner::Config;

fn config() -> Config {
    let cases = std::env::var("AVFS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Shell-like text: words, quotes, operators, substitutions, redirections and paths.
fn shellish() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        Just("rm".to_string()),
        Just("-rf".to_string()),
        Just("/".to_string()),
        Just("~".to_string()),
        Just("$HOME".to_string()),
        Just("$(".to_string()),
        Just(")".to_string()),
        Just("`".to_string()),
        Just("'".to_string()),
        Just("\"".to_string()),
        Just("|".to_string()),
        Just("&&".to_string()),
        Just(";".to_string()),
        Just(">".to_string()),
        Just("<<EOF\nx\nEOF\n".to_string()),
        Just("{a,b}".to_string()),
        Just("bash -c".to_string()),
        Just("awk 'BEGIN{system(\"".to_string()),
        Just("sed 'w /".to_string()),
        Just("python3 -c".to_string()),
        Just("xargs".to_string()),
        Just("env".to_string()),
        Just("f(){ f|f& };f".to_string()),
        "[a-z./-]{1,12}",
        "\\PC{0,8}",
    ];
    prop::collection::vec(atom, 0..24).prop_map(|v| v.join(" "))
}

proptest! {
    #![proptest_config(config())]

    /// The policy decides any text, shell-shaped or not, without panicking, and a decision
    /// always says why.
    #[test]
    fn the_policy_decides_any_text(text in prop_oneof![shellish(), "\\PC{0,200}"], cwd in "(/[a-z]{0,3}){0,3}") {
        let policy = PolicyEngine::builtin();
        let d = policy.decide(&CommandRequest { argv: None, shell: Some(text.clone()), cwd: if cwd.is_empty() { "/".into() } else { cwd.clone() } });
        prop_assert!(!d.reason.is_empty(), "{text:?}");
        let d = policy.decide(&CommandRequest {
            argv: Some(text.split(' ').map(str::to_string).collect()),
            shell: None,
            cwd: "/".into(),
        });
        prop_assert!(!d.reason.is_empty());
    }

    /// Any text parses to a workspace path or a typed error, and a parsed path never
    /// climbs out of the root.
    #[test]
    fn paths_parse_or_fail_typed(text in "\\PC{0,64}|[./a]{0,40}") {
        match VPath::parse_with_dirs(&text) {
            Ok((p, dirs)) => {
                prop_assert!(!p.as_str().starts_with('/'));
                prop_assert!(!p.as_str().split('/').any(|c| c == ".."));
                for d in dirs {
                    prop_assert!(!d.as_str().split('/').any(|c| c == ".."));
                }
            }
            Err(e) => prop_assert_eq!(e.kind(), "invalid_path"),
        }
    }

    /// Random bytes as any kind of stored object decode or fail as corrupt_vault.
    #[test]
    fn objects_decode_or_fail_typed(data in prop::collection::vec(any::<u8>(), 0..256), k in 0u8..8) {
        if let Err(e) = references(k, &data) {
            prop_assert_eq!(e.kind(), "corrupt_vault");
        }
        for k in [kind::CHUNK_LIST, kind::TREE, kind::ROOT] {
            if let Err(e) = references(k, &data) {
                prop_assert_eq!(e.kind(), "corrupt_vault");
            }
        }
    }

    /// Policy TOML: random text and mutations of the built-in policy load or fail typed.
    #[test]
    fn policy_toml_loads_or_fails_typed(
        noise in "\\PC{0,300}",
        cut in 0usize..4000,
        insert in "\\PC{0,20}",
    ) {
        if let Err(e) = PolicyEngine::from_toml(&noise) {
            prop_assert_eq!(e.kind(), "invalid_argument");
        }
        let base = PolicyEngine::builtin_toml();
        let at = base.char_indices().map(|(i, _)| i).nth(cut % base.chars().count()).unwrap_or(0);
        let mutated = format!("{}{insert}{}", &base[..at], &base[at..]);
        if let Err(e) = PolicyEngine::from_toml(&mutated) {
            prop_assert_eq!(e.kind(), "invalid_argument");
        }
    }

    /// The session socket's requests: random JSON-ish text never panics the decoder.
    #[test]
    fn session_requests_decode_or_fail(text in prop_oneof![
        "\\PC{0,120}",
        "\\{\"op\":\"(exec|ping|stop)\",\"(req|opts|argv|shell|cwd|timeout)\":[^}]{0,40}\\}",
    ]) {
        let _ = serde_json::from_str::<Request>(&text);
    }

    /// Numeric option parsers: anything gives a value in range or a typed error.
    #[test]
    fn numbers_parse_in_range_or_fail_typed(text in "\\PC{0,30}|[0-9]{1,40}[a-z]{0,3}|-?[0-9.e]{1,20}") {
        match limits::parse_timeout("--timeout", &text) {
            Ok(d) => prop_assert!(!d.is_zero() && d <= limits::MAX_TIMEOUT),
            Err(e) => prop_assert_eq!(e.kind(), "invalid_argument"),
        }
        match limits::parse_limit("--max-size-mb", &text, limits::MAX_QUOTA_MIB) {
            Ok(Some(v)) => prop_assert!(v <= limits::MAX_QUOTA_MIB),
            Ok(None) => prop_assert_eq!(text.trim(), "none"),
            Err(e) => prop_assert_eq!(e.kind(), "invalid_argument"),
        }
        if let Err(e) = limits::parse_time_or_age("--since", &text, agentvfs::model::now_ns()) {
            prop_assert_eq!(e.kind(), "invalid_argument");
        }
    }
}
