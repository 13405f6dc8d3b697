//! Runtime services: what adapters (the CLI, later the mount and the proxy) call. They
//! resolve names to vaults and workspaces and orchestrate the model; no parsing, no printing.

pub mod apply;
pub mod approvals;
pub mod confine;
pub mod daemon;
pub mod exec;
pub mod files;
pub mod git;
pub mod history;
pub mod lease;
pub mod maintenance;
pub mod migrate;
pub mod mount;
pub mod mounter;
pub mod mounts;
pub mod policy;
pub mod proxy;
pub mod quota;
pub mod registry;
pub mod runner;
pub mod sandbox;
pub mod search;
pub mod secrets;
pub mod session;
pub mod transfer;
pub mod workspace;

pub use registry::Registry;
pub use workspace::{DeleteReport, Target, VaultListEntry, WorkspaceService};

/// What the services' unit tests share: a real vault file in a temporary home.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Registry, WorkspaceService};
    use crate::model::{Actor, Workspace};

    /// A temporary `$AVFS_HOME` with one registered vault, `demo`, opened.
    pub struct Home {
        pub dir: tempfile::TempDir,
        pub service: WorkspaceService,
        pub ws: Workspace,
    }

    pub fn home() -> Home {
        let dir = tempfile::tempdir().expect("temp dir");
        let actor = Actor {
            actor: "test".into(),
            source: "test".into(),
        };
        let service = WorkspaceService::new(Registry::at(dir.path().join("home")), actor);
        service
            .create_vault("demo", None, crate::store::Engine::default(), None, None)
            .expect("create vault");
        let (_, ws) = service.open(Some("demo")).expect("open vault");
        Home { dir, service, ws }
    }

    /// A mounter for tests that must fail before anything is mounted: it says mounts can
    /// be made, and fails the test if one is asked for.
    pub struct NeverMounts;

    impl super::mounter::Mounter for NeverMounts {
        fn mount(
            &self,
            _session: std::sync::Arc<super::mount::MountFs>,
            dir: &std::path::Path,
        ) -> crate::Result<Box<dyn super::mounter::ServedMount>> {
            panic!("this test must fail before mounting {}", dir.display())
        }
    }
}
