//! The relay's CORS policy: `*`, or an allow-list of origins echoed per
//! request (as the Node relay's `cors.ts` does).

/// Which browser origins may read relay responses.
///
/// ```
/// use human_plus_relay::CorsPolicy;
///
/// assert_eq!(CorsPolicy::parse("*").unwrap(), CorsPolicy::Any);
/// let list = CorsPolicy::parse("https://Example.com/, http://localhost:3000").unwrap();
/// assert_eq!(
///     list,
///     CorsPolicy::List(vec!["https://example.com".into(), "http://localhost:3000".into()])
/// );
/// assert!(CorsPolicy::parse("*, https://example.com").is_err());
/// assert!(CorsPolicy::parse("null").is_err());
/// assert!(CorsPolicy::parse("https://example.com/path").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CorsPolicy {
    /// `access-control-allow-origin: *` on every route response.
    #[default]
    Any,
    /// Echo the request's `Origin` when listed (with `Vary: Origin` on
    /// every route response); send no allow-origin header otherwise.
    List(Vec<String>),
}

/// A CORS policy that cannot mean what its author wanted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CORS origin policy: {0}")]
pub struct CorsError(String);

impl CorsPolicy {
    /// Parses `*` or a comma-separated list of origins. Refuses an empty
    /// list, `*` mixed with origins, `null`, and entries with a path,
    /// query or credentials.
    pub fn parse(value: &str) -> Result<CorsPolicy, CorsError> {
        CorsPolicy::from_origins(value.split(','))
    }

    /// Builds a policy from separate entries, with the rules of
    /// [`CorsPolicy::parse`].
    pub fn from_origins<I, S>(entries: I) -> Result<CorsPolicy, CorsError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let entries: Vec<String> = entries
            .into_iter()
            .map(|e| e.as_ref().trim().to_owned())
            .filter(|e| !e.is_empty())
            .collect();
        if entries.is_empty() {
            return Err(CorsError("the origin list is empty".into()));
        }
        if entries.iter().any(|e| e == "*") {
            if entries.len() == 1 {
                return Ok(CorsPolicy::Any);
            }
            return Err(CorsError(
                "`*` cannot be combined with named origins".into(),
            ));
        }
        let mut origins: Vec<String> = Vec::new();
        for entry in &entries {
            let origin = normalize_origin(entry)?;
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        Ok(CorsPolicy::List(origins))
    }

    /// The allow-origin value for a request from `origin`, if any.
    pub(crate) fn allow_origin<'a>(&self, origin: Option<&'a str>) -> Option<&'a str> {
        match self {
            CorsPolicy::Any => Some("*"),
            CorsPolicy::List(list) => origin.filter(|o| list.iter().any(|l| l == o)),
        }
    }
}

fn normalize_origin(raw: &str) -> Result<String, CorsError> {
    if raw.eq_ignore_ascii_case("null") {
        return Err(CorsError("`null` is refused".into()));
    }
    let url = url::Url::parse(raw).map_err(|_| CorsError(format!("{raw:?} is not an origin")))?;
    if (url.path() != "/" && !url.path().is_empty())
        || url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(CorsError(format!(
            "{raw:?} has a path, query or credentials"
        )));
    }
    let origin = url.origin();
    if origin.is_tuple() {
        return Ok(origin.ascii_serialization());
    }
    match url.host_str() {
        Some(host) => {
            let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
            Ok(format!("{}://{host}{port}", url.scheme()))
        }
        None => Err(CorsError(format!("{raw:?} is not an origin"))),
    }
}
