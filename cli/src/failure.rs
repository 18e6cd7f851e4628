//! How a run of the command fails: a message and an exit code.

use std::io;

/// A failure, with the exit code it maps to.
pub struct Failure {
    /// What went wrong; `None` ends the run without a word.
    pub message: Option<String>,
    /// 2: bad arguments (as clap's own usage errors); 1: anything else; 0: the reader of the
    /// output went away.
    pub code: u8,
}

impl Failure {
    /// A bad argument (exit code 2).
    pub fn usage(message: impl ToString) -> Failure {
        Failure {
            message: Some(message.to_string()),
            code: 2,
        }
    }

    /// Anything else (exit code 1).
    pub fn other(message: impl ToString) -> Failure {
        Failure {
            message: Some(message.to_string()),
            code: 1,
        }
    }
}

/// A failure to write the output. A closed pipe (`slidegate simulate | head -1`) means the
/// reader has read all it wants: the run stops there, quietly and successfully, as `cat` does.
impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Failure {
                message: None,
                code: 0,
            }
        } else {
            Failure::other(format!("cannot write the output: {e}"))
        }
    }
}
