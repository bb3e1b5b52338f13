//! The `agentloom` binary: the desktop app with no arguments, the CLI otherwise.

use clap::Parser as _;

// Keeps freed memory for reuse between frames instead of returning it to the OS each time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    agentloom::logging::init();
    let cli = agentloom::cli::Cli::parse();
    let command = cli.command.unwrap_or(agentloom::cli::CliCommand::Open {
        graph: None,
        db: None,
        workspace: None,
    });
    let code = match agentloom::cli::run_command(command) {
        Ok(code) => code,
        Err(err) if agentloom::cli::is_closed_stdout(&err) => 0,
        Err(err) => {
            eprintln!("error: {err:#}");
            agentloom::cli::EXIT_FAILED
        }
    };
    std::process::exit(code);
}
