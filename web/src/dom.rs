//! Small things the app asks of the page: where the keyboard's focus goes, and a yes or
//! no from the user before something that can't be undone.

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
