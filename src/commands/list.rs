//! `lockrun list [PREFIX]`: every held lock and semaphore under a prefix.

use crate::backend::Backend;
use crate::cli::ListArgs;
use crate::error::Failure;

pub struct Job {
    /// PREFIX without a trailing slash; empty for everything.
    pub prefix: String,
    pub json: bool,
}

pub fn prepare<B: Backend>(args: ListArgs) -> Result<Job, Failure> {
    let prefix =
        match args.prefix.as_deref() {
            None => String::new(),
            Some("") => return Err(Failure::Usage(
                "PREFIX is empty; give a prefix like `jobs`, or leave it out to list everything"
                    .into(),
            )),
            Some(p) => {
                let p = p.strip_suffix('/').unwrap_or(p);
                B::check_key(p)?;
                p.to_string()
            }
        };
    Ok(Job {
        prefix,
        json: args.json,
    })
}

/// Whether `name` is `prefix` or under it, segment-wise; everything is
/// under the empty prefix.
pub fn is_under(name: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || name == prefix
        || name
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::is_under;

    #[test]
    fn under_is_by_segments() {
        assert!(is_under("jobs/a", "jobs"));
        assert!(is_under("jobs", "jobs"));
        assert!(is_under("jobs", ""));
        assert!(!is_under("jobsx/a", "jobs"));
        assert!(!is_under("job", "jobs"));
    }
}
