//! How backends are registered: the `backends!` macro, which turns one
//! line per backend into everything that lists the backends, and what the
//! generic jobs need to run on whichever one is chosen.
//!
//! The one invocation of `backends!` is in `backend/mod.rs`, because the
//! `pub mod NAME;` each line declares must be expanded there to find
//! `backend/NAME/`. Outside its folder, a new backend is that line (which
//! also declares its variant of [`BackendName`], kept in a build that lacks
//! the backend, so that `--backend NAME` says so), a `Place` of the
//! integration tests, and its Cargo feature, listed under `default` with
//! the shared stacks it uses (docs/adding-a-backend.md).

use super::{Backend, BackendName, Registration};

/// Declares each backend's module and generates, from one line per backend
/// (`#[cfg(...)] NAME / Variant => TYPE, "help"`, in the order the man page
/// describes them):
///
/// - `BackendName`: every backend's variant, whatever the build (the `cfg`
///   leaves out the module, never the name), `NAME` as `--backend` takes it
///   and "help" as its possible value's help, listed by name;
/// - `BackendArgs`: `--backend` and each backend's `Backend::Args`;
/// - `HoldFlags` and `ReleaseFlags`: each backend's `HoldArgs`, shown among
///   the session flags of `elect` and `semaphore`, and its `ReleaseArgs`;
/// - `BACKENDS`: each backend's `Backend::REGISTRATION`;
/// - `with_backend`: the one choice of backend, by its registered name.
///
/// Each backend's flags live in a field named after it, so [`Pick`] finds
/// them the same way for all.
macro_rules! backends {
    ($( $(#[$cfg:meta])* $name:ident / $variant:ident => $backend:ty, $help:literal ),+ $(,)?) => {
        $( $(#[$cfg])* pub mod $name; )+

        /// The engines lockrun can keep its locks in, whether or not this
        /// build has them: a backend left out still parses, to say so.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum BackendName {
            $( #[doc = $help] $variant, )+
        }

        impl clap::ValueEnum for BackendName {
            /// By name, as `--backend`'s help lists them.
            fn value_variants<'a>() -> &'a [Self] {
                static BY_NAME: std::sync::OnceLock<Vec<BackendName>> = std::sync::OnceLock::new();
                BY_NAME.get_or_init(|| {
                    let mut names = vec![$( BackendName::$variant ),+];
                    names.sort_by_key(|name| name.to_string());
                    names
                })
            }

            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(match self {
                    $( BackendName::$variant => clap::builder::PossibleValue::new(stringify!($name)).help($help), )+
                })
            }
        }

        /// Which engine, and each engine's own settings (global flags).
        #[derive(Debug, clap::Args)]
        #[command(next_help_heading = "Backend")]
        pub struct BackendArgs {
            /// Where the locks live.
            ///
            /// One of the values below; without this flag or LOCKRUN_BACKEND,
            /// consul.
            #[arg(long, global = true, value_enum, env = "LOCKRUN_BACKEND", default_value_t = $crate::backend::BackendName::Consul, value_name = "BACKEND")]
            pub backend: $crate::backend::BackendName,
            $(
                $(#[$cfg])*
                #[command(flatten)]
                pub $name: <$backend as $crate::backend::Backend>::Args,
            )+
        }

        /// The engines' own flags of `elect` and `semaphore`, shown among the
        /// session flags.
        #[derive(Debug, clap::Args)]
        pub struct HoldFlags {
            $(
                $(#[$cfg])*
                #[command(flatten)]
                pub $name: <$backend as $crate::backend::Backend>::HoldArgs,
            )+
        }

        /// The engines' own flags of `release`.
        #[derive(Debug, clap::Args)]
        pub struct ReleaseFlags {
            $(
                $(#[$cfg])*
                #[command(flatten)]
                pub $name: <$backend as $crate::backend::Backend>::ReleaseArgs,
            )+
        }

        /// Every backend in this build, in the order the man page describes them.
        pub const BACKENDS: &[$crate::backend::Registration] = &[
            $( $(#[$cfg])* <$backend as $crate::backend::Backend>::REGISTRATION, )+
        ];

        /// The one choice of backend. A backend left out of this build has
        /// no line here, so its name falls through to `unavailable`.
        pub fn with_backend<R: $crate::backend::registry::Runner>(
            name: $crate::backend::BackendName,
            runner: R,
        ) -> R::Output {
            $(
                $(#[$cfg])*
                if name == <$backend as $crate::backend::Backend>::REGISTRATION.name {
                    return runner.run($crate::backend::registry::Pick::<$backend> {
                        args: |a| &a.$name,
                        hold: |h| &h.$name,
                        release: |r| &r.$name,
                    });
                }
            )+
            runner.unavailable(name)
        }
    };
}
pub(crate) use backends;

/// The registration of `name`.
pub fn registration(name: BackendName) -> &'static Registration {
    super::BACKENDS
        .iter()
        .find(|r| r.name == name)
        .expect("every backend is registered")
}

/// Every flag backend `B` defines: its global flags, those of `elect` and
/// `semaphore`, and those of `release` (its [`Registration::flags`]).
pub fn flags_of<B: Backend>(cmd: clap::Command) -> clap::Command {
    use clap::Args;
    let cmd = B::Args::augment_args(cmd);
    let cmd = B::HoldArgs::augment_args(cmd);
    B::ReleaseArgs::augment_args(cmd)
}

/// The clap ids of the flags `augment` defines.
pub fn flag_ids(augment: fn(clap::Command) -> clap::Command) -> Vec<String> {
    augment(clap::Command::new("flags"))
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect()
}

/// Where backend `B`'s own flags are among everyone's.
pub struct Pick<B: Backend> {
    pub args: fn(&super::BackendArgs) -> &B::Args,
    pub hold: fn(&super::HoldFlags) -> &B::HoldArgs,
    pub release: fn(&super::ReleaseFlags) -> &B::ReleaseArgs,
}

/// What runs a job on whichever backend was chosen: generic over the
/// backend, so that each job is written once.
pub trait Runner {
    type Output;
    fn run<B: Backend>(self, pick: Pick<B>) -> Self::Output;
    /// The backend was left out of this build (a Cargo feature).
    fn unavailable(self, name: BackendName) -> Self::Output;
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;
    use crate::backend::{with_backend, BACKENDS};

    /// What `with_backend` ran: the backend's own name and the name it
    /// is registered under, or nothing for a backend this build lacks.
    struct Chosen;

    impl Runner for Chosen {
        type Output = Option<(&'static str, BackendName)>;

        fn run<B: Backend>(self, _: Pick<B>) -> Self::Output {
            Some((B::NAME, B::REGISTRATION.name))
        }

        fn unavailable(self, _: BackendName) -> Self::Output {
            None
        }
    }

    #[test]
    fn each_name_runs_the_backend_registered_under_it() {
        for name in BackendName::value_variants() {
            let registered = BACKENDS.iter().any(|r| r.name == *name);
            match with_backend(*name, Chosen) {
                Some((own, chosen)) => {
                    assert_eq!(chosen, *name);
                    assert_eq!(own, name.to_string());
                    assert!(registered, "{name} runs but is not in BACKENDS");
                }
                None => assert!(!registered, "{name} is in BACKENDS but does not run"),
            }
        }
    }
}
