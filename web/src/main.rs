//! The researcher's app: sign in, build a crosstab query from the codebook with live
//! validation, read the results, and use the developer portal. It talks only to its own
//! backend (`/app/...`); the API key never reaches the browser.

mod api;
mod bands;
mod choices;
mod dom;
mod export;
mod figures;
mod grid;
mod history;
mod labels;
mod local;
mod portal;
mod query;
mod results;
mod saved;
mod stored;
mod table_view;
#[cfg(test)]
mod testing;
mod unsettled;
mod workbench;
mod worker;

use leptos::prelude::*;

use crosstab_contract::app::Me;
use crosstab_contract::CrosstabRequest;

/// The screens of the app, reflected in the URL hash so they can be bookmarked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Screen {
    Query,
    Table,
    History,
    ApiReference,
    Keys,
    Usage,
}

impl Screen {
    fn hash(self) -> &'static str {
        match self {
            Screen::Query => "#/query",
            Screen::Table => "#/tables",
            Screen::History => "#/history",
            Screen::ApiReference => "#/portal/api",
            Screen::Keys => "#/portal/keys",
            Screen::Usage => "#/portal/usage",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Screen::Query => "Query",
            Screen::Table => "Tables",
            Screen::History => "History",
            Screen::ApiReference => "API reference",
            Screen::Keys => "API keys",
            Screen::Usage => "Usage",
        }
    }

    fn from_hash(hash: &str) -> Screen {
        [
            Screen::Table,
            Screen::History,
            Screen::ApiReference,
            Screen::Keys,
            Screen::Usage,
        ]
        .into_iter()
        .find(|s| s.hash() == hash)
        .unwrap_or(Screen::Query)
    }

    const ALL: [Screen; 6] = [
        Screen::Query,
        Screen::Table,
        Screen::History,
        Screen::ApiReference,
        Screen::Keys,
        Screen::Usage,
    ];
}

/// What the page shows, for its title and focus: `None` while the first check of the
/// session runs, else whether signed in and the screen.
type Shown = Option<(bool, Screen)>;

/// The document's title for what is shown: the screen's name first (what a tab, a
/// bookmark and a screen reader announce), then the app's.
fn document_title(shown: Shown) -> String {
    match shown {
        None => "crosstab — audience queries".to_owned(),
        // Signed out, only the Tables screen (a file from this computer) is itself.
        Some((false, screen)) if screen != Screen::Table => "Sign in — crosstab".to_owned(),
        Some((_, screen)) => format!("{} — crosstab", screen.title()),
    }
}

/// Moves the keyboard's (and a screen reader's) place to the new screen's heading, once
/// it is drawn: after a change of screen, focus would otherwise stay on the link clicked
/// (or, after Back, on nothing), and nothing would say the page changed.
fn focus_new_screen() {
    request_animation_frame(|| {
        let Some(document) = web_sys::window().and_then(|w| w.document()) else {
            return;
        };
        let target = document
            .query_selector("main h1")
            .ok()
            .flatten()
            .or_else(|| document.query_selector("main").ok().flatten());
        if let Some(target) = target {
            // Focusable by script only: not a stop for Tab.
            if !target.has_attribute("tabindex") {
                let _ = target.set_attribute("tabindex", "-1");
            }
            if let Ok(target) = wasm_bindgen::JsCast::dyn_into::<web_sys::HtmlElement>(target) {
                let _ = target.focus();
            }
        }
    });
}

fn current_hash() -> String {
    web_sys::window()
        .and_then(|w| w.location().hash().ok())
        .unwrap_or_default()
}

/// Whether the user is signed in: unknown while the first check runs.
#[derive(Debug, Clone, PartialEq)]
enum Session {
    Checking,
    SignedOut,
    SignedIn(Me),
}

/// Moves `session` to `next`; the browser's lists (history, saved tables) become the
/// new user's, and a local file opened by the last one is closed.
fn enter(session: RwSignal<Session>, next: Session) {
    let owner = match &next {
        Session::SignedIn(me) => Some(format!("{}/{}", me.account, me.username)),
        Session::Checking | Session::SignedOut => None,
    };
    if let Session::SignedIn(before) = session.get_untracked() {
        if !matches!(&next, Session::SignedIn(me) if *me == before) {
            local::close();
        }
    }
    stored::set_owner(owner);
    session.set(next);
}

#[component]
fn App() -> impl IntoView {
    stored::forget_unowned(&[history::KEY, saved::SAVED, saved::HISTORY]);
    let session = RwSignal::new(Session::Checking);
    let screen = RwSignal::new(Screen::from_hash(&current_hash()));
    // Back and Forward move between screens as the links do (the hash names the screen);
    // the same screen is not set again, which would build it anew.
    let _ = window_event_listener(leptos::ev::hashchange, move |_| {
        let next = Screen::from_hash(&current_hash());
        if screen.get_untracked() != next {
            screen.set(next);
        }
    });
    // A query picked from the history, handed to the query screen to load and run.
    let rerun = RwSignal::new(None::<CrosstabRequest>);
    // An ended session (expired, or signed out in another tab) brings back the sign-in
    // form, whatever screen asked.
    let ended = RwSignal::new(false);
    api::on_session_ended(move || {
        // Only a session that was there ended (the first look, signed out, answers 401 too).
        if matches!(session.get_untracked(), Session::SignedIn(_)) {
            ended.set(true);
        }
        enter(session, Session::SignedOut);
    });
    // The title follows what is shown; focus moves to a new screen's heading (not on the
    // first load, where the page's start is the place to be).
    Effect::new(move |before: Option<Shown>| {
        let shown: Shown = match session.get() {
            Session::Checking => None,
            // An ended session shows the sign-in form whatever the screen.
            Session::SignedOut if ended.get() => Some((false, Screen::Query)),
            Session::SignedOut => Some((false, screen.get())),
            Session::SignedIn(_) => Some((true, screen.get())),
        };
        if let Some(document) = web_sys::window().and_then(|w| w.document()) {
            document.set_title(&document_title(shown));
        }
        if matches!(before, Some(Some(before)) if Some(before) != shown) {
            focus_new_screen();
        }
        shown
    });
    leptos::task::spawn_local(async move {
        let next = match api::me().await {
            Ok(me) => Session::SignedIn(me),
            Err(_) => Session::SignedOut,
        };
        enter(session, next);
    });
    // A sign-out the server did not confirm leaves the session as it is, and says so: on
    // a shared computer, a reload would otherwise sign the last user back in.
    let sign_out_error = RwSignal::new(None::<String>);
    // A confirmed sign-out is said on whatever screen it leaves.
    let signed_out = RwSignal::new(false);
    let go = move |target: Screen| {
        screen.set(target);
        if let Some(window) = web_sys::window() {
            let _ = window.location().set_hash(target.hash());
        }
    };
    let sign_out = move |_| {
        leptos::task::spawn_local(async move {
            match api::logout().await {
                Ok(()) => {
                    sign_out_error.set(None);
                    signed_out.set(true);
                    saved::forget_answers();
                    enter(session, Session::SignedOut);
                }
                Err(failure) => sign_out_error.set(Some(format!(
                    "Not signed out: {} Try again before leaving this computer.",
                    failure.message
                ))),
            }
        });
    };
    view! {
        // The first stop for Tab: past the navigation to the screen's heading.
        <a class="skip-link" href="#main"
            on:click=move |ev: leptos::ev::MouseEvent| { ev.prevent_default(); focus_new_screen(); }>"Skip to the content"</a>
        <header class="topbar">
            <span class="brand">"crosstab"</span>
            {move || match session.get() {
                Session::SignedIn(me) => view! {
                    <nav aria-label="Main">
                        {Screen::ALL.into_iter().map(|s| view! {
                            <a href=s.hash()
                               class:active=move || screen.get() == s
                               aria-current=move || (screen.get() == s).then_some("page")
                               on:click=move |ev: leptos::ev::MouseEvent| { ev.prevent_default(); go(s); }>
                                {s.title()}
                            </a>
                        }).collect_view()}
                    </nav>
                    <span class="who">{format!("{} · {}", me.username, me.account)}</span>
                    <button class="link" on:click=sign_out>"Sign out"</button>
                }.into_any(),
                _ => ().into_any(),
            }}
        </header>
        {move || sign_out_error.get().map(|message| view! { <p class="error" role="alert" id="sign-out-error">{message}</p> })}
        {move || (signed_out.get() && !ended.get() && matches!(session.get(), Session::SignedOut)).then(|| view! {
            <p class="status signed-out" role="status" id="signed-out">"You have signed out."</p>
        })}
        <main id="main">
            {move || match session.get() {
                Session::Checking => view! { <p class="status" role="status">"Loading…"</p> }.into_any(),
                // A survey file on this computer needs no account: tables from it are
                // computed here, so they work signed out (and offline) too.
                // (A session that ended asks to sign in again, here too: the table being
                // built comes back with it.)
                Session::SignedOut if screen.get() == Screen::Table && !ended.get() => view! {
                    <p class="row"><a href="#/query" on:click=move |ev: leptos::ev::MouseEvent| { ev.prevent_default(); go(Screen::Query); }>"← Sign in to use the server's surveys"</a></p>
                    <workbench::WorkbenchScreen signed_in=false />
                }.into_any(),
                Session::SignedOut => view! {
                    <SignIn session=session ended=ended />
                    <section class="card signin">
                        <h2>"Private data"</h2>
                        <p class="muted">"Work on a survey file from this computer without signing in: it is computed in this page, never uploaded, and not billed."</p>
                        <button class="secondary" id="open-local" on:click=move |_| { ended.set(false); go(Screen::Table); }>"Open a survey file"</button>
                    </section>
                }.into_any(),
                Session::SignedIn(_) => match screen.get() {
                    Screen::Query => view! { <query::QueryScreen rerun=rerun /> }.into_any(),
                    Screen::Table => view! { <workbench::WorkbenchScreen signed_in=true /> }.into_any(),
                    Screen::History => view! {
                        <history::HistoryScreen on_pick=Callback::new(move |request| {
                            rerun.set(Some(request));
                            go(Screen::Query);
                        }) />
                    }.into_any(),
                    Screen::ApiReference => view! { <portal::ApiReference /> }.into_any(),
                    Screen::Keys => view! { <portal::Keys /> }.into_any(),
                    Screen::Usage => view! { <portal::Usage /> }.into_any(),
                },
            }}
        </main>
    }
}

#[component]
fn SignIn(session: RwSignal<Session>, ended: RwSignal<bool>) -> impl IntoView {
    let username = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        busy.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            match api::login(&username.get_untracked(), &password.get_untracked()).await {
                Ok(me) => {
                    ended.set(false);
                    enter(session, Session::SignedIn(me));
                }
                Err(failure) => error.set(Some(failure.message)),
            }
            password.set(String::new());
            busy.set(false);
        });
    };
    view! {
        <section class="card signin">
            <h1>"Sign in"</h1>
            {move || ended.get().then(|| view! {
                <p class="warning" role="status" id="session-ended">"Your session has ended: sign in again. The table you were building is kept."</p>
            })}
            <p class="muted">"Use the username and password your account administrator gave you."</p>
            <form on:submit=submit>
                <label for="username">"Username"</label>
                <input id="username" name="username" autocomplete="username" required
                    prop:value=move || username.get()
                    on:input=move |ev| username.set(event_target_value(&ev)) />
                <label for="password">"Password"</label>
                <input id="password" name="password" type="password" autocomplete="current-password" required
                    prop:value=move || password.get()
                    on:input=move |ev| password.set(event_target_value(&ev)) />
                {move || error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
                <button type="submit" disabled=move || busy.get()>
                    {move || if busy.get() { "Signing in…" } else { "Sign in" }}
                </button>
            </form>
        </section>
    }
}

fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(App);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_title_names_the_screen_shown_first() {
        assert_eq!(document_title(None), "crosstab — audience queries");
        assert_eq!(
            document_title(Some((true, Screen::Table))),
            "Tables — crosstab"
        );
        assert_eq!(
            document_title(Some((true, Screen::Usage))),
            "Usage — crosstab"
        );
        // Signed out, every screen but Tables is the sign-in form.
        assert_eq!(
            document_title(Some((false, Screen::Keys))),
            "Sign in — crosstab"
        );
        assert_eq!(
            document_title(Some((false, Screen::Table))),
            "Tables — crosstab"
        );
    }
}
