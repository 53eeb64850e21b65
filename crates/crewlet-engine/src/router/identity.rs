//! Who a seat is on each source, and what a unit or an org-wide seat owns:
//! the identities and ownership the [`NotificationRouter`](super::NotificationRouter)
//! matches notifications against.

use crewlet_config::{Seat, Unit, UnitIntegrations};
use crewlet_integrations::Source;

/// What a unit owns, for routing: its `integrations` and `slack_channel`.
#[derive(Debug, Clone, Default)]
pub(super) struct UnitOwns {
    pub(super) integrations: UnitIntegrations,
    pub(super) slack_channel: Option<String>,
}

pub(super) fn units_preorder(list: &[Unit], out: &mut Vec<UnitOwns>) {
    for u in list {
        out.push(UnitOwns {
            integrations: u.integrations.clone(),
            slack_channel: u.slack_channel.clone(),
        });
        units_preorder(&u.children, out);
    }
}

pub(super) fn same(a: &str, b: &str) -> bool {
    a.trim_start_matches('@')
        .eq_ignore_ascii_case(b.trim_start_matches('@'))
}

/// The identities a seat is known by on `source`: its own account there,
/// the contact field that identifies a person there (both the source's
/// [`WebhookSource`](crewlet_integrations::WebhookSource) knowledge), its
/// emails, and its handle where `@handle` names a seat.
pub(super) fn identities(seat: &Seat, source: Source) -> Vec<&str> {
    let hook = source.webhook();
    let r = &seat.role;
    let c = r.contact.as_ref();
    let out: [Option<&str>; 5] = [
        hook.seat_account(&r.integrations),
        c.and_then(|c| hook.contact_id(c)),
        c.and_then(|c| c.email.as_deref()),
        r.email.as_deref(),
        // `@eng` in a comment names the seat by its handle.
        hook.handle_is_identity().then_some(seat.handle.as_str()),
    ];
    out.into_iter()
        .flatten()
        // A `${VAR}` identity is not expanded here: it matches nobody.
        .filter(|s| !s.trim().is_empty() && !s.contains("${"))
        .collect()
}

/// Whether `owned` names `project` (a blank name owns nothing).
fn names(owned: Option<&str>, project: &str) -> bool {
    owned.is_some_and(|p| !p.trim().is_empty() && p.eq_ignore_ascii_case(project))
}

/// The project, space or channel an org-wide seat owns on `source`.
pub(super) fn seat_owns(seat: &Seat, source: Source, project: &str) -> bool {
    names(
        source.webhook().seat_project(&seat.role.integrations),
        project,
    )
}

pub(super) fn unit_owns(owns: &UnitOwns, source: Source, project: &str) -> bool {
    let hook = source.webhook();
    let u = &owns.integrations;
    names(hook.unit_project(u, owns.slack_channel.as_deref()), project)
        || hook
            .unit_projects(u)
            .iter()
            .any(|p| p.eq_ignore_ascii_case(project))
}
