//! `avfs`: the command-line adapter. It parses arguments, calls the library's services and
//! renders text or JSON. No business rules live here.

mod commands;
mod output;

use clap::FromArgMatches;

use agentvfs::error::exit;
use agentvfs::model::Actor;
use agentvfs::service::{Registry, WorkspaceService};

fn main() {
    // A proxied command's sandbox starts as this program: run it and go.
    if let Some(code) = agentvfs::service::sandbox::maybe_init() {
        std::process::exit(code);
    }
    // `args_os`: an argument that is not UTF-8 (a path) must reach clap, not panic here.
    let json_requested = std::env::args_os().any(|a| a == "--json");
    let parsed = commands::command()
        .try_get_matches()
        .and_then(|m| commands::Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            // A missing subcommand is a usage error; only asking for help or the version is not.
            let informational =
                matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
            if json_requested && !informational {
                let msg = e.render().to_string();
                let first = msg
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("error: ");
                let name = invoked_command();
                let doc =
                    output::error_doc(&name, "usage", first, serde_json::json!({ "help": msg }));
                println!("{doc}");
                std::process::exit(exit::USAGE);
            }
            e.exit();
        }
    };
    if let Some((name, e)) = commands::if_head_misused(&cli, invoked_command) {
        std::process::exit(output::finish(cli.json, &name, Err(e)));
    }
    let ctx = commands::Ctx {
        json: cli.json,
        workspace: cli.selected_workspace(),
        service: WorkspaceService::new(Registry::from_env(), Actor::from_env("cli"))
            .with_expected_head(cli.if_head),
    };
    let (name, result) = commands::run(&ctx, cli.command);
    std::process::exit(output::finish(cli.json, name, result));
}

/// The subcommand path this process's arguments name (`quota set`), for an error's
/// envelope.
fn invoked_command() -> String {
    command_path(
        &commands::command(),
        std::env::args_os()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned()),
    )
}

/// The subcommand path the arguments name (`quota set`), as far as it can be recognised
/// without a successful parse: words that name a subcommand, skipping options.
fn command_path(cmd: &clap::Command, args: impl Iterator<Item = String>) -> String {
    let mut names = Vec::new();
    let mut cur = cmd.clone();
    for arg in args {
        if arg == "--" {
            break;
        }
        if arg.starts_with('-') {
            continue;
        }
        let Some(sub) = cur.find_subcommand(&arg).cloned() else {
            continue;
        };
        names.push(sub.get_name().to_string());
        cur = sub;
    }
    if names.is_empty() {
        "avfs".to_string()
    } else {
        names.join(" ")
    }
}
