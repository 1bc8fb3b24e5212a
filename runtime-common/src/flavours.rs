//! What each flavour makes: the async manager and resolver, or the blocking
//! ones.

use std::sync::Arc;

use crate::blocking::BlockingHumanPlus;
use crate::driver::{AsyncFlavour, BlockingFlavour, Driver, Flavour};
use crate::manager::HumanPlus;
use crate::parts::Parts;
use crate::resolve::{Resolve, ResolveBlocking, SystemResolver};

impl Flavour for AsyncFlavour {
    type Resolver = dyn Resolve;
    type Manager<D: Driver<Flavour = Self>, S> = HumanPlus<D, S>;
    fn system_resolver() -> Arc<dyn Resolve> {
        Arc::new(SystemResolver)
    }
    fn manager<D: Driver<Flavour = Self>, S>(parts: Parts<D, S>) -> HumanPlus<D, S> {
        HumanPlus::from_parts(parts)
    }
}

impl Flavour for BlockingFlavour {
    const BLOCKING: bool = true;
    type Resolver = dyn ResolveBlocking;
    type Manager<D: Driver<Flavour = Self>, S> = BlockingHumanPlus<D, S>;
    fn system_resolver() -> Arc<dyn ResolveBlocking> {
        Arc::new(SystemResolver)
    }
    fn manager<D: Driver<Flavour = Self>, S>(parts: Parts<D, S>) -> BlockingHumanPlus<D, S> {
        BlockingHumanPlus::from_parts(parts)
    }
}
