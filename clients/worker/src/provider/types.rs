//! What every provider client answers in: a batch or file as a list shows
//! it, a page of a list, a batch as GET answers it, and whose an untagged
//! batch is, and a synchronous call's answer.

use std::time::SystemTime;

use reqwest::header::HeaderMap;
use serde_json::Value;
use tally_core::operation::BatchObservation;

/// One batch as a provider's list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// The provider's name of the batch (`batches/…`).
    pub name: String,
    /// The tag tally gave it (a display name or a metadata value), if any.
    pub tag: Option<String>,
    pub create_time: Option<SystemTime>,
    /// Whether it has ended.
    pub done: bool,
}

/// Whose an untagged batch is, as its results say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// It has not ended: nothing says yet.
    Unknown,
    /// The job of this mark ([`crate::tags::job_mark`]).
    Job(String),
    /// Not a job's of tally (another client's, or a probe).
    Other,
}

/// One file as a provider's list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedFile {
    pub name: String,
    /// Its display name or file name (tally's tag), if any.
    pub tag: Option<String>,
    pub create_time: Option<SystemTime>,
}

/// One page of a list, and where the next starts (`None`: the last page).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// A batch as GET answers it: decoded for the reducer, and as sent.
#[derive(Debug, Clone)]
pub struct Observed {
    pub observation: BatchObservation,
    pub resource: Value,
}

impl Observed {
    /// The files holding the batch's answers (its responses file; OpenAI's
    /// output and error files), those it names.
    pub fn answer_files(&self) -> Vec<String> {
        let o = &self.observation;
        o.output_file.iter().chain(&o.error_file).cloned().collect()
    }
}

/// A medium file uploaded for requests to reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Uploaded {
    /// The provider's name of the file (to delete it).
    pub name: String,
    /// What a request's part references.
    pub uri: String,
    /// When the provider deletes it, where it says.
    pub expire: Option<SystemTime>,
}

/// What uploading a medium file came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Upload {
    /// Stored and usable.
    Ready(Uploaded),
    /// Stored, but the provider could not process it (why): the file
    /// cannot be used.
    Unusable(String),
}

/// A 2xx answer to a synchronous call.
#[derive(Debug, Clone)]
pub struct OnlineAnswer {
    pub headers: HeaderMap,
    pub body: Value,
}

impl OnlineAnswer {
    /// A header's text, if the answer has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}
