//! Every memory conformance suite against the in-memory twins and against
//! PostgreSQL (a fresh migrated database per test).

mod common;

use std::sync::Arc;

use crewlet_memory::*;

mod memory {
    use super::*;

    mod diary {
        use super::*;
        crewlet_memory::diary_conformance!(|| async {
            Some((Arc::new(MemoryDiary::new()) as Arc<dyn Diary>, ()))
        });
    }
    mod episodes {
        use super::*;
        crewlet_memory::episodes_conformance!(|| async {
            Some((Arc::new(MemoryEpisodes::new()) as Arc<dyn Episodes>, ()))
        });
    }
    mod skills {
        use super::*;
        crewlet_memory::skills_conformance!(|| async {
            Some((Arc::new(MemorySkills::new()) as Arc<dyn Skills>, ()))
        });
    }
    mod profiles {
        use super::*;
        crewlet_memory::counterparty_profiles_conformance!(|| async {
            Some((
                Arc::new(MemoryCounterpartyProfiles::new()) as Arc<dyn CounterpartyProfiles>,
                (),
            ))
        });
    }
    mod onboarding {
        use super::*;
        crewlet_memory::onboarding_markers_conformance!(|| async {
            Some((
                Arc::new(MemoryOnboardingMarkers::new()) as Arc<dyn OnboardingMarkers>,
                (),
            ))
        });
    }
}

mod postgres {
    use super::*;

    mod diary {
        use super::*;
        crewlet_memory::diary_conformance!(|| async {
            let (guard, stores) = common::stores().await?;
            Some((stores.diary, guard))
        });
    }
    mod episodes {
        use super::*;
        crewlet_memory::episodes_conformance!(|| async {
            let (guard, stores) = common::stores().await?;
            Some((stores.episodes, guard))
        });
    }
    mod skills {
        use super::*;
        crewlet_memory::skills_conformance!(|| async {
            let (guard, stores) = common::stores().await?;
            Some((stores.skills, guard))
        });
    }
    mod profiles {
        use super::*;
        crewlet_memory::counterparty_profiles_conformance!(|| async {
            let (guard, stores) = common::stores().await?;
            Some((stores.profiles, guard))
        });
    }
    mod onboarding {
        use super::*;
        crewlet_memory::onboarding_markers_conformance!(|| async {
            let (guard, stores) = common::stores().await?;
            Some((stores.onboarding, guard))
        });
    }
}
