//! Small things the app asks of the page: where the keyboard's focus goes, a yes or no
//! from the user before something that can't be undone, and times in the reader's own
//! words.

/// Moves the keyboard's focus to the element `id`, if it is there.
pub fn focus(id: &str) {
    use wasm_bindgen::JsCast;
    if let Some(element) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id(id))
        .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok())
    {
        let _ = element.focus();
    }
}

/// Whether the user answers yes to `question` (the browser's own dialog: focus comes back
/// where it was); no when the page can't ask.
pub fn confirmed(question: &str) -> bool {
    web_sys::window()
        .and_then(|w| w.confirm_with_message(question).ok())
        .unwrap_or(false)
}

/// An ISO 8601 time (as stored, or as the server sends it) the way the reader's browser
/// writes a date and time in their language and time zone (`30 Nov 2026, 17:04`);
/// text that is no such time is shown as it is.
pub fn local_time(iso: &str) -> String {
    let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_str(iso));
    if date.get_time().is_nan() {
        return iso.to_owned();
    }
    let options = js_sys::Object::new();
    for (name, style) in [("dateStyle", "medium"), ("timeStyle", "short")] {
        let _ = js_sys::Reflect::set(&options, &name.into(), &style.into());
    }
    let language = web_sys::window()
        .and_then(|w| w.navigator().language())
        .unwrap_or_else(|| "en".to_owned());
    date.to_locale_string(&language, &options).into()
}

/// Now on the reader's clock, for a file's name: `20261130-1704`.
pub fn file_stamp() -> String {
    let now = js_sys::Date::new_0();
    format!(
        "{:04}{:02}{:02}-{:02}{:02}",
        now.get_full_year(),
        now.get_month() + 1,
        now.get_date(),
        now.get_hours(),
        now.get_minutes()
    )
}
