//! The actor: who makes a change (user, agent, session), as recorded in the audit log.

/// Who is acting, for the audit log.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The user or agent (default: `$AVFS_ACTOR`, else `$USER`).
    pub actor: String,
    /// The adapter: `cli`, `mount`, `proxy`, `sdk`.
    pub source: String,
}

impl Actor {
    pub fn from_env(source: &str) -> Actor {
        let actor = std::env::var("AVFS_ACTOR")
            .or_else(|_| std::env::var("USER"))
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| format!("uid:{}", rustix::process::getuid().as_raw()));
        Actor {
            actor,
            source: source.to_string(),
        }
    }
}
