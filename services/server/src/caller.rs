//! Who is calling. The auth layer puts a [`Caller`] in each request's
//! extensions; handlers read its name to record as the actor of attempts,
//! redrives and jobs. Without auth every caller is `anonymous`.

/// The authenticated caller of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
}

/// The caller's name, or `anonymous`.
pub fn actor<T>(req: &tonic::Request<T>) -> String {
    req.extensions()
        .get::<Caller>()
        .map_or_else(|| "anonymous".to_string(), |c| c.name.clone())
}
