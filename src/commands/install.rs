//! `completions` and `man`: the generated files an installer needs, from the
//! binary itself, so that they always describe the binary installed.

use std::io::Write;

use crate::cli::{CompletionsArgs, ManArgs};
use crate::docs;
use crate::error::Failure;
use crate::exit::Exit;

pub fn completions(args: &CompletionsArgs) -> Result<Exit, Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&docs::completion(args.shell))
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure::Internal(format!("cannot write the completion script ({e})")))?;
    Ok(Exit::Success)
}

pub fn man(args: &ManArgs) -> Result<Exit, Failure> {
    let written = docs::write_man(&args.dir).map_err(|e| {
        Failure::Config(format!(
            "cannot write the man pages into `{}` ({e}); choose a directory you can write to",
            args.dir.display()
        ))
    })?;
    tracing::info!(pages = written.len(), dir = %args.dir.display(), "man pages written");
    Ok(Exit::Success)
}
