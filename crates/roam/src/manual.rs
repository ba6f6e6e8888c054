//! Shell completions and man pages, generated from the command line's own definition so
//! that they list every subcommand and flag there is: `roam completions bash|zsh|fish|...`
//! and `roam man [DIR]` (both hidden from `--help`; the README's install steps run them).

use std::path::Path;

use anyhow::{Context, Result};

/// Prints the completion script of `shell` for `cmd` on stdout.
pub fn completions(shell: clap_complete::Shell, mut cmd: clap::Command) -> Result<i32> {
    clap_complete::generate(shell, &mut cmd, "roam", &mut std::io::stdout());
    Ok(0)
}

/// Writes `roam.1` and one page per subcommand (`roam-run.1`, ...) into `dir`, or prints
/// `roam.1` on stdout when no directory is given.
pub fn man(cmd: clap::Command, dir: Option<&Path>) -> Result<i32> {
    match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("writing man pages into {}", dir.display()))?;
        }
        None => clap_mangen::Man::new(cmd).render(&mut std::io::stdout())?,
    }
    Ok(0)
}
