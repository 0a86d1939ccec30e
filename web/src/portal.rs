//! The developer portal: the API reference rendered from `/v1/docs` (no CDN assets),
//! the user's API keys, how to call the API (a key, or single sign-on), and billed usage.

use crosstab_contract::app::{
    DailyQuota, KeyInfo, NewKey, UsageQuery, UsageReport, USAGE_MAX_DAYS,
};
use leptos::prelude::*;
use serde_json::Value;

use crate::api::{self, ApiFailure};
use crate::dom::local_time;

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn schema_name(schema: &Value) -> String {
    schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.rsplit('/').next())
        .map(str::to_owned)
        .or_else(|| {
            schema
                .get("type")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "object".to_owned())
}

#[component]
pub fn ApiReference() -> impl IntoView {
    let doc = RwSignal::new(None::<Result<Value, ApiFailure>>);
    leptos::task::spawn_local(async move { doc.set(Some(api::openapi().await)) });
    move || {
        match doc.get() {
        None => view! { <section class="card"><p class="status" role="status">"Loading the API reference…"</p></section> }.into_any(),
        Some(Err(failure)) => view! { <section class="card"><p class="error" role="alert">{failure.message}</p></section> }.into_any(),
        Some(Ok(doc)) => {
            let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
            let info = doc.get("info").cloned().unwrap_or(Value::Null);
            let server = doc.pointer("/servers/0/url").and_then(Value::as_str).unwrap_or("/v1").to_owned();
            let mut operations = Vec::new();
            if let Some(paths) = doc.get("paths").and_then(Value::as_object) {
                for (path, item) in paths {
                    if let Some(methods) = item.as_object() {
                        for (method, operation) in methods {
                            operations.push((method.to_uppercase(), path.clone(), operation.clone()));
                        }
                    }
                }
            }
            let schemas: Vec<(String, Value)> = doc
                .pointer("/components/schemas")
                .and_then(Value::as_object)
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default();
            view! {
                <section class="card reference" id="api-reference">
                    <h1>{text(&info, "title")}</h1>
                    <p class="muted">{format!("Version {} · base URL ends in {server}", text(&info, "version"))}</p>
                    <pre class="description">{text(&info, "description")}</pre>
                    <h2>"Operations"</h2>
                    {operations.into_iter().map(|(method, path, op)| {
                        let secured = op.get("security").and_then(Value::as_array)
                            .is_some_and(|s| s.iter().any(|r| r.as_object().is_some_and(|o| !o.is_empty())));
                        let responses: Vec<(String, Value)> = op.get("responses").and_then(Value::as_object)
                            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default();
                        let body = op.pointer("/requestBody/content/application~1json/schema").map(schema_name);
                        view! {
                            <article class="operation">
                                <h3><span class=format!("method {}", method.to_lowercase())>{method.clone()}</span>" "<code>{format!("{server}{path}")}</code></h3>
                                <p>{text(&op, "summary")}" "<span class="muted">{format!("operationId: {}", text(&op, "operationId"))}</span></p>
                                <p>{text(&op, "description")}</p>
                                <p>{if secured { "Requires the Service-Engine-Authorizer header." } else { "No authentication." }}</p>
                                {body.map(|name| view! { <p>"Request body: "<code>{name}</code></p> })}
                                <div class="table-wrap" tabindex="0" role="region" aria-label=format!("Answers of {method} {path}")>
                                <table>
                                    <thead><tr><th scope="col">"Status"</th><th scope="col">"Meaning"</th><th scope="col">"Example"</th></tr></thead>
                                    <tbody>
                                        {responses.into_iter().map(|(status, response)| {
                                            let example = response.pointer("/content/application~1json/examples")
                                                .and_then(Value::as_object)
                                                .and_then(|m| m.values().next())
                                                .and_then(|e| e.get("value"))
                                                .map(pretty);
                                            view! {
                                                <tr><td><code>{status}</code></td><td>{text(&response, "description")}</td>
                                                <td>{example.map(|e| view! { <pre>{e}</pre> })}</td></tr>
                                            }
                                        }).collect_view()}
                                    </tbody>
                                </table>
                                </div>
                            </article>
                        }
                    }).collect_view()}
                    <h2>"Schemas"</h2>
                    {schemas.into_iter().map(|(name, schema)| {
                        let properties: Vec<(String, Value)> = schema.get("properties").and_then(Value::as_object)
                            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default();
                        let required: Vec<String> = schema.get("required").and_then(Value::as_array)
                            .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()).unwrap_or_default();
                        let region = format!("Fields of {name}");
                        view! {
                            <article class="schema">
                                <h3><code>{name}</code></h3>
                                <p>{text(&schema, "description")}</p>
                                {(!properties.is_empty()).then(|| view! {
                                    <div class="table-wrap" tabindex="0" role="region" aria-label=region>
                                    <table>
                                        <thead><tr><th scope="col">"Field"</th><th scope="col">"Type"</th><th scope="col">"Required"</th><th scope="col">"Meaning"</th></tr></thead>
                                        <tbody>
                                            {properties.into_iter().map(|(field, prop)| {
                                                let is_required = required.contains(&field);
                                                view! { <tr><td><code>{field}</code></td><td>{schema_name(&prop)}</td>
                                                    <td>{if is_required { "yes" } else { "no" }}</td><td>{text(&prop, "description")}</td></tr> }
                                            }).collect_view()}
                                        </tbody>
                                    </table>
                                    </div>
                                })}
                            </article>
                        }
                    }).collect_view()}
                </section>
            }.into_any()
        }
    }
    }
}

/// How a backend calls `/v1/crosstab`: with a key, or with single sign-on (a bearer JWT of
/// a trusted identity provider, or a token exchanged for an assertion).
#[component]
fn CallingTheApi() -> impl IntoView {
    // The backend the app talks to: the one the page names, else the page's own origin.
    let origin = Some(api::backend_origin())
        .filter(|origin| !origin.is_empty())
        .or_else(|| web_sys::window().and_then(|w| w.location().origin().ok()))
        .unwrap_or_default();
    let base = format!("{origin}/v1");
    let body = r#"'{"SurveyCode":"DEMO","PopulationBaseCode":"ADULTS","TargetCodes":["F2554"]}'"#;
    let with_key = format!(
        "curl -s {base}/crosstab -H 'Content-Type: application/json' \\\n  -H \"Service-Engine-Authorizer: $KEY\" -d {body}"
    );
    let with_jwt = format!(
        "curl -s {base}/crosstab -H 'Content-Type: application/json' \\\n  -H \"Service-Engine-Authorizer: Bearer $JWT\" -d {body}"
    );
    let jwt_exchange = format!(
        "curl -s {base}/oauth/token \\\n  -d grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer -d \"assertion=$JWT\"\n# → {{\"access_token\": \"…\", \"token_type\": \"Bearer\", \"expires_in\": 3600}}"
    );
    let saml_exchange = format!(
        "ASSERTION=$(base64 -w0 assertion.xml | tr '+/' '-_' | tr -d '=')\ncurl -s {base}/oauth/token \\\n  -d grant_type=urn:ietf:params:oauth:grant-type:saml2-bearer -d \"assertion=$ASSERTION\""
    );
    view! {
        <section class="card" id="calling-the-api">
            <h2>"Calling the API"</h2>
            <p>"Every call to /v1/crosstab carries one credential in the Service-Engine-Authorizer header, and is billed to your account either way."</p>
            <h3>"With an API key"</h3>
            <pre>{with_key}</pre>
            <h3>"With single sign-on"</h3>
            <p>"When the operator trusts your organisation's identity provider, send its token instead of a key. A JWT from your OpenID Connect provider (for example a client-credentials access token whose audience is this service) goes in the same header:"</p>
            <pre>{with_jwt}</pre>
            <p>"Or exchange your provider's JWT, or a signed SAML 2.0 assertion (base64url), for a token of this service, valid at most an hour, and send that as the Bearer token:"</p>
            <pre>{jwt_exchange}</pre>
            <pre>{saml_exchange}</pre>
            <p class="muted">"A token that is not accepted gets the same 401 as a bad key. Exchanges are not billed."</p>
        </section>
    }
}

#[component]
pub fn Keys() -> impl IntoView {
    let keys = RwSignal::new(None::<Result<Vec<KeyInfo>, ApiFailure>>);
    let created = RwSignal::new(None::<NewKey>);
    let copied = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let env = RwSignal::new("test".to_owned());
    let days = RwSignal::new("90".to_owned());
    // One creation at a time: a second click would replace a shown-once key unseen.
    let creating = RwSignal::new(false);
    let reload =
        move || leptos::task::spawn_local(async move { keys.set(Some(api::keys().await)) });
    reload();
    let create = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        if creating.get_untracked() {
            return;
        }
        // Only an empty field means "never": a typo must not make a key that never
        // expires.
        let days = match expiry_days(&days.get_untracked()) {
            Ok(days) => days,
            Err(message) => {
                error.set(Some(message));
                return;
            }
        };
        creating.set(true);
        let env = env.get_untracked();
        leptos::task::spawn_local(async move {
            match api::create_key(&env, days).await {
                Ok(key) => {
                    created.set(Some(key));
                    copied.set(false);
                    error.set(None);
                    // The button pressed is disabled while it works: focus goes to the key.
                    request_animation_frame(|| crate::dom::focus("key-copy"));
                }
                Err(failure) => error.set(Some(failure.message)),
            }
            creating.set(false);
            reload();
        });
    };
    view! {
        <section class="card">
            <h1>"API keys"</h1>
            <p class="muted">"Keys authenticate calls to /v1/crosstab from your servers. Keep them server-side, in a secret manager; never ship one to a browser. Use separate keys per environment and rotate any key that may have leaked."</p>
            {move || created.get().map(|key| view! {
                <div class="warning" role="status">
                    <p>"Your new key (shown once — copy it now):"</p>
                    <pre class="secret" id="key-secret">{key.key.clone()}</pre>
                    <button class="secondary" id="key-copy" on:click=move |_| copy(key.key.clone(), copied, error)>
                        {move || if copied.get() { "Copied" } else { "Copy key" }}
                    </button>
                    <button class="secondary" on:click=move |_| {
                        created.set(None);
                        crate::dom::focus("key-create");
                    }>"I have stored it"</button>
                </div>
            })}
            <form class="row" on:submit=create>
                <label for="key-env">"Environment"</label>
                <select id="key-env" on:change=move |ev| env.set(event_target_value(&ev))>
                    <option value="test">"test"</option>
                    <option value="live">"live"</option>
                </select>
                <label for="key-days">"Expires in (days, empty = never)"</label>
                <input id="key-days" inputmode="numeric" prop:value=move || days.get() on:input=move |ev| days.set(event_target_value(&ev)) />
                <button type="submit" id="key-create" disabled=move || creating.get()>
                    {move || if creating.get() { "Creating…" } else { "Create key" }}
                </button>
            </form>
            {move || error.get().map(|m| view! { <p class="error" role="alert">{m}</p> })}
            {move || match keys.get() {
                None => view! { <p class="status" role="status">"Loading keys…"</p> }.into_any(),
                Some(Err(failure)) => view! { <p class="error" role="alert">{failure.message}</p> }.into_any(),
                Some(Ok(list)) if list.is_empty() => view! { <p class="empty">"No keys yet."</p> }.into_any(),
                Some(Ok(list)) => view! {
                    <div class="table-wrap" tabindex="0" role="region" aria-label="API keys">
                    <table>
                        <thead><tr><th scope="col">"Key id"</th><th scope="col">"Env"</th><th scope="col">"Created"</th><th scope="col">"Expires"</th><th scope="col">"Status"</th><th></th></tr></thead>
                        <tbody>
                            {list.into_iter().map(|key| {
                                let id = key.id.clone();
                                let active = key.revoked_at.is_none();
                                view! {
                                    <tr>
                                        <td><code>{key.id.clone()}</code></td><td>{key.env.clone()}</td><td>{local_time(&key.created_at)}</td>
                                        <td>{key.expires_at.as_deref().map_or_else(|| "never".to_owned(), local_time)}</td>
                                        <td>{key.revoked_at.as_deref().map_or_else(|| "active".to_owned(), |at| format!("revoked {}", local_time(at)))}</td>
                                        <td>{active.then(|| view! {
                                            <button class="secondary" aria-label=format!("Revoke key {id}") on:click=move |_| {
                                                let id = id.clone();
                                                if !crate::dom::confirmed(&format!(
                                                    "Revoke key {id}? Calls with it fail from their next request; this can't be undone."
                                                )) {
                                                    return;
                                                }
                                                leptos::task::spawn_local(async move {
                                                    match api::revoke_key(&id).await {
                                                        Ok(()) => error.set(None),
                                                        Err(failure) => error.set(Some(failure.message)),
                                                    }
                                                    reload();
                                                });
                                            }>"Revoke"</button>
                                        })}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                    </div>
                }.into_any(),
            }}
        </section>
        <CallingTheApi/>
    }
}

#[component]
pub fn Usage() -> impl IntoView {
    let report = RwSignal::new(None::<Result<UsageReport, ApiFailure>>);
    // The period's inputs: empty asks for the backend's default, which then fills them.
    let from = RwSignal::new(String::new());
    let to = RwSignal::new(String::new());
    // Only the latest request's answer is shown (an earlier one may come back later).
    let asked = RwSignal::new(0u32);
    let load = move || {
        let Some(ask) = asked.try_update(|n| {
            *n += 1;
            *n
        }) else {
            return;
        };
        let day = |text: String| Some(text).filter(|t| !t.trim().is_empty());
        let query = UsageQuery {
            from: day(from.get_untracked()),
            to: day(to.get_untracked()),
        };
        report.set(None);
        leptos::task::spawn_local(async move {
            let answer = api::usage(&query).await;
            if asked.try_get_untracked() != Some(ask) {
                return;
            }
            // The period answered fills the inputs, unless they were changed meanwhile.
            if let Ok(answer) = &answer {
                let sent = |day: &Option<String>| day.clone().unwrap_or_default();
                if from.try_get_untracked() == Some(sent(&query.from)) {
                    from.set(answer.from.clone());
                }
                if to.try_get_untracked() == Some(sent(&query.to)) {
                    to.set(answer.to.clone());
                }
            }
            report.try_set(Some(answer));
        });
    };
    load();
    let refused = move || matches!(report.get(), Some(Err(_)));
    // One live region, always there, whose text says what the page now shows.
    let status = move || match report.get() {
        None => "Loading usage…".to_owned(),
        Some(Err(_)) => String::new(),
        Some(Ok(report)) if report.rows.is_empty() => {
            format!("No billed calls from {} to {}.", report.from, report.to)
        }
        Some(Ok(report)) => {
            let total: u64 = report.rows.iter().map(|r| r.calls).sum();
            format!(
                "{total} billed calls from {} to {}.",
                report.from, report.to
            )
        }
    };
    view! {
        <section class="card">
            <h1>"Usage"</h1>
            <p class="muted">"Billed calls (HTTP 200 from /v1/crosstab) by day and survey, and by user for queries run in this app. Rejected calls are not billed. Days are UTC; a report covers at most " {USAGE_MAX_DAYS} " days."</p>
            <form class="row" id="usage-period" on:submit=move |ev| { ev.prevent_default(); load(); }>
                <label for="usage-from">"From"</label>
                <input id="usage-from" type="date" prop:value=move || from.get() on:input=move |ev| from.set(event_target_value(&ev))
                    aria-invalid=move || refused().to_string() aria-describedby=move || refused().then_some("usage-error") />
                <label for="usage-to">"To"</label>
                <input id="usage-to" type="date" prop:value=move || to.get() on:input=move |ev| to.set(event_target_value(&ev))
                    aria-invalid=move || refused().to_string() aria-describedby=move || refused().then_some("usage-error") />
                <button type="submit">"Show"</button>
            </form>
            <p class="status" role="status" id="usage-status">{status}</p>
            {move || report.with(|report| report.as_ref().and_then(|r| r.as_ref().ok()).and_then(|r| r.quota.clone())).map(|quota| view! {
                <p id="usage-quota" data-left=quota.left().to_string()>{quota_text(&quota)}</p>
            })}
            {move || match report.get() {
                None => ().into_any(),
                Some(Err(failure)) => view! { <p class="error" role="alert" id="usage-error">{failure.message}</p> }.into_any(),
                Some(Ok(report)) if report.rows.is_empty() => ().into_any(),
                Some(Ok(report)) => {
                    let total: u64 = report.rows.iter().map(|r| r.calls).sum();
                    // The backend names the user where it knows who ran the queries.
                    let by_user = report.rows.iter().any(|r| r.user.is_some() || r.idp.is_some());
                    let label_columns = if by_user { "3" } else { "2" };
                    let caption = format!("Billed calls from {} to {}", report.from, report.to);
                    view! {
                        <table id="usage-table">
                            <caption>{caption}</caption>
                            <thead><tr>
                                <th scope="col">"Day"</th><th scope="col">"Survey"</th>
                                {by_user.then(|| view! { <th scope="col">"User"</th> })}
                                <th scope="col">"Billed calls"</th>
                            </tr></thead>
                            <tbody>
                                {report.rows.into_iter().map(|r| view! {
                                    <tr>
                                        <td>{r.day}</td><td>{r.survey}</td>
                                        {by_user.then(|| view! { <td>{caller_label(r.user, r.idp)}</td> })}
                                        <td class="num">{r.calls}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                            <tfoot><tr><th scope="row" colspan=label_columns>"Total"</th><td class="num">{total}</td></tr></tfoot>
                        </table>
                    }.into_any()
                }
            }}
        </section>
    }
}

/// The account's daily quota as the usage page says it.
fn quota_text(quota: &DailyQuota) -> String {
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    format!(
        "Today ({}, UTC) your account has used {} of its {} billed call{} a day: {} left. The quota starts again at midnight UTC; a table needs all its calls within what is left.",
        quota.day,
        quota.used,
        quota.calls,
        plural(quota.calls),
        quota.left()
    )
}

/// Who made a usage row's calls: the app user, the identity provider's tokens, or a key.
fn caller_label(user: Option<String>, idp: Option<String>) -> String {
    match (user, idp) {
        (Some(user), _) => user,
        (None, Some(idp)) => format!("(single sign-on: {idp})"),
        (None, None) => "(API key)".to_owned(),
    }
}

/// A key's lifetime as typed: empty for none, else a whole number of days from 1.
fn expiry_days(text: &str) -> Result<Option<u32>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.parse::<u32>() {
        Ok(days) if days > 0 => Ok(Some(days)),
        _ => Err(format!(
            "'{text}' is not a number of days: give a whole number from 1, or leave the field empty for a key that never expires."
        )),
    }
}

/// Puts `text` on the clipboard; `copied` says when it is there, `error` when it can't
/// be (a page served over plain HTTP from another host has no clipboard to write).
fn copy(text: String, copied: RwSignal<bool>, error: RwSignal<Option<String>>) {
    const BY_HAND: &str = "The key could not be copied here: select it and copy it by hand.";
    let navigator = web_sys::window().map(|w| w.navigator());
    let has_clipboard = navigator.as_ref().is_some_and(|navigator| {
        js_sys::Reflect::get(navigator, &"clipboard".into()).is_ok_and(|c| !c.is_undefined())
    });
    let Some(navigator) = navigator.filter(|_| has_clipboard) else {
        error.set(Some(BY_HAND.into()));
        return;
    };
    let writing = navigator.clipboard().write_text(&text);
    leptos::task::spawn_local(async move {
        let done = wasm_bindgen_futures::JsFuture::from(writing).await.is_ok();
        copied.set(done);
        if !done {
            error.set(Some(BY_HAND.into()));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::{expiry_days, quota_text};
    use crosstab_contract::app::DailyQuota;

    #[test]
    fn the_quota_says_what_is_left_today() {
        let quota = DailyQuota {
            day: "2026-11-29".into(),
            calls: 500,
            used: 37,
        };
        assert_eq!(
            quota_text(&quota),
            "Today (2026-11-29, UTC) your account has used 37 of its 500 billed calls a day: 463 left. The quota starts again at midnight UTC; a table needs all its calls within what is left."
        );
        let spent = DailyQuota { used: 900, ..quota };
        assert!(quota_text(&spent).contains(": 0 left."));
    }

    #[test]
    fn only_an_empty_expiry_means_never() {
        assert_eq!(expiry_days(""), Ok(None));
        assert_eq!(expiry_days(" 90 "), Ok(Some(90)));
        for typo in ["0", "9o", "-1", "1.5", "ninety"] {
            assert!(expiry_days(typo).is_err(), "{typo}");
        }
    }
}
