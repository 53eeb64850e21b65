//! A durable subscription (group) and its bookkeeping: mail waiting, in
//! flight and delayed; members taking, settling, nacking and giving mail
//! back; the member loop that runs a handler.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::Notify;

use super::{Broker, Mail};
use crate::batch::{partition, run_batch_handler};
use crate::node::{Node, Signal, Wake, run_handler, wait_while_paused};
use crate::{BatchOptions, Delivery, EventHandler};

/// A durable subscription: its mail waits here while no member is attached.
pub(super) struct Group {
    pub(super) topic: Arc<str>,
    pub(super) name: Arc<str>,
    pub(super) queue: Mutex<GroupQueue>,
    pub(super) notify: Notify,
}

#[derive(Default)]
pub(super) struct GroupQueue {
    pub(super) ready: VecDeque<Mail>,
    /// Members waiting for mail that nobody has woken yet.
    pub(super) waiting: usize,
    /// Messages handed to members and not yet acked, nacked or returned.
    pub(super) in_flight: usize,
    /// Nacked messages waiting for their redelivery delay.
    pub(super) delayed: usize,
}

impl Group {
    pub(super) fn push(&self, mail: Mail) {
        let wake = {
            let mut q = self.queue.lock();
            q.ready.push_back(mail);
            Self::take_waiter(&mut q)
        };
        if wake {
            self.notify.notify_one();
        }
    }

    /// Pushes several messages at once: a member that wakes sees them all.
    pub(super) fn push_all(&self, mails: Vec<Mail>) {
        let wake = {
            let mut q = self.queue.lock();
            q.ready.extend(mails);
            Self::take_waiter(&mut q)
        };
        if wake {
            self.notify.notify_one();
        }
    }

    fn take_waiter(q: &mut GroupQueue) -> bool {
        if q.waiting > 0 {
            q.waiting -= 1;
            true
        } else {
            false
        }
    }

    /// Puts unhandled mail back at the front (a member detached or was cancelled).
    fn give_back(&self, mails: impl DoubleEndedIterator<Item = Mail>) {
        let wake = {
            let mut q = self.queue.lock();
            let mut n = 0;
            for mail in mails.rev() {
                q.ready.push_front(mail);
                n += 1;
            }
            q.in_flight = q.in_flight.saturating_sub(n);
            n > 0 && Self::take_waiter(&mut q)
        };
        if wake {
            self.notify.notify_one();
        }
    }

    /// Takes up to `max` messages; `None` when there are none (the caller is
    /// then counted as waiting and must await `notify`).
    fn take(&self, max: usize, into: &mut VecDeque<Mail>) -> bool {
        let mut q = self.queue.lock();
        if q.ready.is_empty() {
            q.waiting += 1;
            return false;
        }
        let n = max.min(q.ready.len());
        into.extend(q.ready.drain(..n));
        q.in_flight += n;
        // More than this member takes: pass the wake-up on to another waiting member.
        let wake_next = !q.ready.is_empty() && Self::take_waiter(&mut q);
        drop(q);
        if wake_next {
            self.notify.notify_one();
        }
        true
    }

    /// Takes up to `max` more messages without waiting for any.
    fn take_ready(&self, max: usize, into: &mut VecDeque<Mail>) {
        let mut q = self.queue.lock();
        let n = max.min(q.ready.len());
        into.extend(q.ready.drain(..n));
        q.in_flight += n;
    }

    fn stop_waiting(&self) {
        let wake = {
            let mut q = self.queue.lock();
            q.waiting = q.waiting.saturating_sub(1);
            // Pass on a wake-up this member may have consumed.
            !q.ready.is_empty() && Self::take_waiter(&mut q)
        };
        if wake {
            self.notify.notify_one();
        }
    }

    fn settle(&self) {
        let mut q = self.queue.lock();
        q.in_flight = q.in_flight.saturating_sub(1);
    }
}

/// A message in a handler: if the member is cancelled before settling it,
/// the message goes back to the subscription (like a consumer disconnect).
struct InFlight<'a> {
    group: &'a Arc<Group>,
    mail: Option<Mail>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(mail) = self.mail.take() {
            self.group.give_back(std::iter::once(mail));
        }
    }
}

/// Mail a member took ahead of its handler; returned to the group if the
/// member stops (or is cancelled) before handling it.
struct Prefetched {
    group: Arc<Group>,
    mails: VecDeque<Mail>,
}

impl Prefetched {
    fn return_all(&mut self) {
        if !self.mails.is_empty() {
            self.group.give_back(self.mails.drain(..));
        }
    }
}

impl Drop for Prefetched {
    fn drop(&mut self) {
        self.return_all();
    }
}

pub(super) struct Member {
    pub(super) broker: Arc<Broker>,
    pub(super) node: Arc<Node>,
    pub(super) group: Arc<Group>,
    pub(super) handler: Arc<dyn EventHandler>,
    pub(super) stop: Arc<Signal>,
    pub(super) paused: tokio::sync::watch::Receiver<bool>,
    pub(super) prefetch: usize,
    pub(super) batch: Option<BatchOptions>,
}

/// Messages of one batch part in a handler: returned to the subscription if
/// the member is cancelled before settling them.
struct InFlightPart<'a> {
    group: &'a Arc<Group>,
    mails: Vec<Mail>,
}

impl Drop for InFlightPart<'_> {
    fn drop(&mut self) {
        if !self.mails.is_empty() {
            self.group.give_back(self.mails.drain(..));
        }
    }
}

impl Member {
    pub(super) async fn run(mut self) {
        // A batch member takes at most one batch at a time.
        let prefetch = match &self.batch {
            Some(b) => b.max_drain,
            None => self.prefetch,
        };
        let mut batch = Prefetched {
            group: self.group.clone(),
            // Grown on demand: an idle seat's inbox member (whose batch
            // may drain hundreds) held ~24 KiB here for nothing.
            mails: VecDeque::new(),
        };
        loop {
            if let Wake::Stop =
                wait_while_paused(&mut self.paused, &self.stop, &self.node.shutdown).await
            {
                break;
            }
            if !self.group.take(prefetch, &mut batch.mails) {
                tokio::select! {
                    () = self.group.notify.notified() => {}
                    () = self.stop.wait() => { self.group.stop_waiting(); break; }
                    () = self.node.shutdown.wait() => { self.group.stop_waiting(); break; }
                    r = self.paused.wait_for(|p| *p) => {
                        self.group.stop_waiting();
                        if r.is_err() { break; }
                    }
                }
                continue;
            }
            if let Some(options) = self.batch.clone() {
                if self.drain_in_parts(&options, &mut batch).await {
                    break;
                }
                continue;
            }
            while let Some(mail) = batch.mails.pop_front() {
                self.handle(mail).await;
                // A handler on in-memory parts never waits, so with a
                // backlog this loop would hold its worker thread for as long
                // as mail keeps coming (the HTTP tasks queued behind it
                // waited 100+ ms); this yields once tokio's budget is spent.
                tokio::task::consume_budget().await;
                if self.stop.is_set() || self.node.shutdown.is_set() || *self.paused.borrow() {
                    batch.return_all();
                    break;
                }
            }
        }
    }

    async fn handle(&self, mail: Mail) {
        let mut in_flight = InFlight {
            group: &self.group,
            mail: Some(mail.clone()),
        };
        let delivery = Delivery {
            event: mail.event.clone(),
            topic: self.group.topic.clone(),
            group: self.group.name.clone(),
            attempt: mail.attempt,
            dead_letter: mail.dead_letter.clone(),
        };
        let result = run_handler(&*self.handler, delivery).await;
        in_flight.mail = None;
        drop(in_flight);
        self.group.settle();
        if let Err(error) = result {
            self.nack_part(vec![mail], error.to_string());
        }
    }

    /// A batch member's drain: what it took, plus what arrives within the
    /// linger, up to `max_drain`, handled part by part (each at most
    /// `max_batch`). `true`: stop.
    async fn drain_in_parts(&mut self, options: &BatchOptions, taken: &mut Prefetched) -> bool {
        if !options.linger.is_zero() && taken.mails.len() < options.max_drain {
            tokio::select! {
                () = tokio::time::sleep(options.linger) => {}
                () = self.stop.wait() => { taken.return_all(); return true; }
                () = self.node.shutdown.wait() => { taken.return_all(); return true; }
            }
        }
        let room = options.max_drain.saturating_sub(taken.mails.len());
        self.group.take_ready(room, &mut taken.mails);
        let mails: Vec<Mail> = taken.mails.drain(..).collect();
        let mut parts = std::collections::VecDeque::from(partition(
            mails,
            |m| Some(&*m.event),
            &options.key,
            options.max_batch,
        ));
        while let Some(part) = parts.pop_front() {
            // The parts not started yet go back if the member is cancelled.
            taken.mails = parts.iter().flatten().cloned().collect();
            self.handle_part(part).await;
            tokio::task::consume_budget().await;
            if self.stop.is_set() || self.node.shutdown.is_set() || *self.paused.borrow() {
                taken.return_all();
                return self.stop.is_set() || self.node.shutdown.is_set();
            }
        }
        taken.mails.clear();
        false
    }

    async fn handle_part(&self, part: Vec<Mail>) {
        let mut in_flight = InFlightPart {
            group: &self.group,
            mails: part.clone(),
        };
        let deliveries = part
            .iter()
            .map(|mail| Delivery {
                event: mail.event.clone(),
                topic: self.group.topic.clone(),
                group: self.group.name.clone(),
                attempt: mail.attempt,
                dead_letter: mail.dead_letter.clone(),
            })
            .collect();
        let result = run_batch_handler(&*self.handler, deliveries).await;
        in_flight.mails.clear();
        drop(in_flight);
        for _ in &part {
            self.group.settle();
        }
        if let Err(error) = result {
            self.nack_part(part, error.to_string());
        }
    }

    /// Failed mail (one message, or a batch part) comes back together after
    /// the delay (a part is drained together again), except what reached
    /// the redelivery cap, which is dead-lettered.
    fn nack_part(&self, part: Vec<Mail>, error: String) {
        let (topic, group) = (&*self.group.topic, &*self.group.name);
        let mut again = Vec::with_capacity(part.len());
        for mut mail in part {
            if mail.attempt > self.node.delivery.max_redeliveries {
                self.broker.dead_letter(mail, topic, group, error.clone());
            } else {
                mail.attempt += 1;
                again.push(mail);
            }
        }
        if again.is_empty() {
            return;
        }
        tracing::debug!(topic, group, messages = again.len(), %error, "handler failed; redelivering after the delay");
        self.group.queue.lock().delayed += again.len();
        let g = self.group.clone();
        let delay = self.node.delivery.redelivery_delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let n = again.len();
            {
                let mut q = g.queue.lock();
                q.delayed = q.delayed.saturating_sub(n);
            }
            g.push_all(again);
        });
    }
}
