//! The calls to one worker, apart from the browser: each call's id, the calls posted
//! before the worker said it is ready (held until it has, since a message posted before
//! its handler is set would be lost), and who is told what when an answer comes, a call
//! cannot be posted, or the worker fails.
//!
//! Generic over the message posted (`M`) and the answer (`A`), so the rules are tested
//! natively; the page's [`super`] gives them the browser's objects.

use std::collections::HashMap;

use futures_channel::oneshot;

/// What a call is told: its answer, or why there is none.
pub type Outcome<A> = Result<A, String>;

/// An answer nobody is waiting for: no id, or an id no open call has.
#[derive(Debug, PartialEq, Eq)]
pub struct Unexpected;

/// The open calls of one worker.
pub struct Calls<M, A> {
    waiting: HashMap<u32, oneshot::Sender<Outcome<A>>>,
    /// Calls held until the worker is ready, in the order they were made (`None` once it
    /// is, or once it failed).
    held: Option<Vec<(u32, M)>>,
    next: u32,
}

impl<M, A> Default for Calls<M, A> {
    fn default() -> Self {
        Calls {
            waiting: HashMap::new(),
            held: Some(Vec::new()),
            next: 0,
        }
    }
}

impl<M, A> Calls<M, A> {
    /// Opens a call whose message `message(id)` makes: the receiver of its outcome, and the
    /// message to post now with its id, if the worker is ready (else it is held).
    pub fn open(
        &mut self,
        message: impl FnOnce(u32) -> M,
    ) -> (oneshot::Receiver<Outcome<A>>, Option<(u32, M)>) {
        let id = self.next;
        self.next = id.wrapping_add(1);
        let (sender, receiver) = oneshot::channel();
        self.waiting.insert(id, sender);
        let message = message(id);
        match self.held.as_mut() {
            Some(held) => {
                held.push((id, message));
                (receiver, None)
            }
            None => (receiver, Some((id, message))),
        }
    }

    /// The worker said it is ready: the calls held so far, in the order they were made,
    /// to post now (none if it said so before, or failed).
    pub fn ready(&mut self) -> Vec<(u32, M)> {
        self.held.take().unwrap_or_default()
    }

    /// Whether the worker has neither said it is ready nor failed: a call made now is
    /// held (whether or not any is yet).
    pub fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// Gives call `id` its answer.
    pub fn answer(&mut self, id: Option<u32>, answer: A) -> Result<(), Unexpected> {
        let sender = id
            .and_then(|id| self.waiting.remove(&id))
            .ok_or(Unexpected)?;
        // A page that stopped waiting dropped its receiver: nothing is owed to it.
        let _ = sender.send(Ok(answer));
        Ok(())
    }

    /// Call `id` could not be posted: it alone is told `reason`.
    pub fn refuse(&mut self, id: u32, reason: &str) {
        if let Some(sender) = self.waiting.remove(&id) {
            let _ = sender.send(Err(reason.to_owned()));
        }
    }

    /// The worker is gone: every open call, posted or held, is told `reason`, and none is
    /// held any longer.
    pub fn fail(&mut self, reason: &str) {
        self.held = None;
        for (_, sender) in self.waiting.drain() {
            let _ = sender.send(Err(reason.to_owned()));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    type Test = Calls<String, &'static str>;

    /// What `receiver` was told, if anything yet.
    fn told(
        receiver: &mut oneshot::Receiver<Outcome<&'static str>>,
    ) -> Option<Outcome<&'static str>> {
        receiver.try_recv().unwrap()
    }

    #[test]
    fn calls_made_before_the_worker_is_ready_are_held_then_posted_in_order() {
        let mut calls = Test::default();
        let (_a, now_a) = calls.open(|id| format!("call {id}"));
        let (_b, now_b) = calls.open(|id| format!("call {id}"));
        assert!(now_a.is_none() && now_b.is_none());
        assert!(calls.holding());
        assert_eq!(
            calls.ready(),
            [(0, "call 0".to_owned()), (1, "call 1".to_owned())]
        );
        assert!(!calls.holding());
        // Once ready, a call goes at once, and a second "ready" posts nothing again.
        let (_c, now_c) = calls.open(|id| format!("call {id}"));
        assert_eq!(now_c, Some((2, "call 2".to_owned())));
        assert!(calls.ready().is_empty());
    }

    #[test]
    fn each_answer_reaches_its_own_call_whatever_the_order() {
        let mut calls = Test::default();
        let (mut first, _) = calls.open(|_| String::new());
        let (mut second, _) = calls.open(|_| String::new());
        calls.ready();
        assert_eq!(calls.answer(Some(1), "second"), Ok(()));
        assert_eq!(told(&mut first), None);
        assert_eq!(told(&mut second), Some(Ok("second")));
        assert_eq!(calls.answer(Some(0), "first"), Ok(()));
        assert_eq!(told(&mut first), Some(Ok("first")));
    }

    #[test]
    fn an_answer_nobody_waits_for_is_reported_and_given_to_no_one() {
        let mut calls = Test::default();
        let (mut open, _) = calls.open(|_| String::new());
        calls.ready();
        assert_eq!(calls.answer(None, "no id"), Err(Unexpected));
        assert_eq!(calls.answer(Some(7), "unknown id"), Err(Unexpected));
        assert_eq!(told(&mut open), None);
        // An id is answered once: a second answer to it is unexpected.
        assert_eq!(calls.answer(Some(0), "once"), Ok(()));
        assert_eq!(calls.answer(Some(0), "twice"), Err(Unexpected));
        assert_eq!(told(&mut open), Some(Ok("once")));
    }

    #[test]
    fn a_call_that_cannot_be_posted_fails_alone() {
        let mut calls = Test::default();
        calls.ready();
        let (mut refused, _) = calls.open(|_| String::new());
        let (mut other, _) = calls.open(|_| String::new());
        calls.refuse(0, "not posted");
        assert_eq!(told(&mut refused), Some(Err("not posted".to_owned())));
        assert_eq!(told(&mut other), None);
        // Its answer, should one come after all, is nobody's.
        assert_eq!(calls.answer(Some(0), "late"), Err(Unexpected));
    }

    #[test]
    fn a_failed_worker_fails_every_open_call_held_or_posted() {
        let mut calls = Test::default();
        calls.ready();
        let (mut posted, _) = calls.open(|_| String::new());
        let mut calls_held = Test::default();
        let (mut held, _) = calls_held.open(|_| String::new());
        calls.fail("stopped");
        calls_held.fail("did not start");
        assert_eq!(told(&mut posted), Some(Err("stopped".to_owned())));
        assert_eq!(told(&mut held), Some(Err("did not start".to_owned())));
        // Nothing held is posted later, and the start timer's check sees nothing held.
        assert!(!calls_held.holding());
        assert!(calls_held.ready().is_empty());
        assert_eq!(calls.answer(Some(0), "late"), Err(Unexpected));
    }

    #[test]
    fn a_page_that_stopped_waiting_does_not_disturb_the_others() {
        let mut calls = Test::default();
        calls.ready();
        let (gone, _) = calls.open(|_| String::new());
        let (mut kept, _) = calls.open(|_| String::new());
        drop(gone);
        assert_eq!(calls.answer(Some(0), "to no one"), Ok(()));
        calls.fail("stopped");
        assert_eq!(told(&mut kept), Some(Err("stopped".to_owned())));
    }

    #[test]
    fn ids_wrap_around_rather_than_overflow() {
        let mut calls = Test {
            next: u32::MAX,
            ..Test::default()
        };
        calls.ready();
        let (_, last) = calls.open(|id| id.to_string());
        let (_, wrapped) = calls.open(|id| id.to_string());
        assert_eq!(last.unwrap().0, u32::MAX);
        assert_eq!(wrapped.unwrap().0, 0);
    }
}
