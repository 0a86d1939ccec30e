//! A list of clickable choices, each handing its value to a callback: the codebook's
//! search results and the query history.

use leptos::prelude::*;

/// One entry of a [`ChoiceList`]: `value` goes to the callback; `primary` and
/// `secondary` are what the button shows, in that order.
#[derive(Debug)]
pub struct Choice<T> {
    /// What a click hands to `on_pick`.
    pub value: T,
    /// The button's first part.
    pub primary: AnyView,
    /// The button's second part.
    pub secondary: AnyView,
}

/// `<ul class=list_class>` of `<li><button class=button_class>`, one per choice.
#[component]
pub fn ChoiceList<T>(
    list_class: &'static str,
    button_class: &'static str,
    choices: Vec<Choice<T>>,
    on_pick: Callback<T>,
) -> impl IntoView
where
    T: Clone + Send + Sync + 'static,
{
    view! {
        <ul class=list_class>
            {choices.into_iter().map(|Choice { value, primary, secondary }| view! {
                <li>
                    <button class=button_class on:click=move |_| on_pick.run(value.clone())>
                        {primary}{secondary}
                    </button>
                </li>
            }).collect_view()}
        </ul>
    }
}
