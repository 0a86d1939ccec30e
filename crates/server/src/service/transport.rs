//! Where the service may send a secret (an account's API key) or take signing keys from
//! without anyone on the way reading or changing them.

use std::net::IpAddr;

/// `text` as the address of a web service: an http or https URL (any case) of a host,
/// with no query, fragment or user; whether it may have a path is the caller's to judge.
/// Else why not.
pub fn web_url(text: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text.trim()).map_err(|error| format!("not a URL ({error})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("not an http(s) URL of a host".to_owned());
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err("a query, fragment or user in it".to_owned());
    }
    Ok(url)
}

/// Whether `url` is `https`, or plain `http` to this machine (a sidecar, a test), where
/// nothing crosses a network.
pub fn is_private(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else {
        return false;
    };
    let host = url.host_str().unwrap_or_default();
    match url.scheme() {
        "https" => true,
        "http" => {
            host.eq_ignore_ascii_case("localhost")
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::is_private;

    #[test]
    fn https_or_this_machine() {
        for url in [
            "https://idp.example.com",
            "http://127.0.0.1:8080/v1",
            "http://[::1]:9/x",
            "http://LOCALHOST/",
        ] {
            assert!(is_private(url), "{url}");
        }
        for url in [
            "http://idp.example.com",
            "http://10.0.0.7/v1",
            "http://localhost.evil.example/",
            "ftp://127.0.0.1/",
            "not a url",
        ] {
            assert!(!is_private(url), "{url}");
        }
    }
}
