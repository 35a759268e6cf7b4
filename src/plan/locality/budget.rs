//! The groups whose loads bound the step time, and their budgets.
//!
//! A *group* is a rank under [`SyncModel::Step`] and a micro-batch under
//! the per-micro-step models; a *column* is the set of groups that share
//! one budget: every rank under [`SyncModel::Step`], the micro-batches of
//! one micro-step otherwise. [`Budget::largest`] reads the largest group
//! of every column of a layout (per phase for [`SyncModel::Phase`]); a
//! layout whose groups all keep within `(1 + tol)` times those
//! ([`Budget::scaled`]) has a step time, with the samples' own costs, at
//! most `(1 + tol)` times that layout's. Every query is O(1); reading a
//! layout is O(n + K).

use alloc::vec;
use alloc::vec::Vec;

use super::super::prepare::Prepared;
use super::super::shape::Shape;
use super::super::sync::SyncModel;
use crate::cost::Phases;

/// The budget of every column of a layout of `shape` under `sync`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Budget {
    pub(super) sync: SyncModel,
    pub(super) shape: Shape,
    /// One a column; only the total counts unless under
    /// [`SyncModel::Phase`].
    pub(super) columns: Vec<Phases>,
}

impl Budget {
    /// The largest group of every column of `slots`: the largest rank
    /// total for [`SyncModel::Step`], micro-step `j`'s largest
    /// micro-batch total for [`SyncModel::MicroStep`] and per phase for
    /// [`SyncModel::Phase`]. O(n + K).
    pub(super) fn largest(
        prep: &Prepared,
        sync: SyncModel,
        shape: Shape,
        slots: &[Vec<u32>],
    ) -> Self {
        let mut budget = Budget {
            sync,
            shape,
            columns: Vec::new(),
        };
        let mut load = vec![Phases::ZERO; budget.groups()];
        for (k, members) in slots.iter().enumerate() {
            let g = budget.group(k);
            for &p in members {
                load[g] += prep.cost(p as usize);
            }
        }
        let cols = match sync {
            SyncModel::Step => 1,
            _ => shape.steps,
        };
        budget.columns = vec![Phases::ZERO; cols];
        for (g, &l) in load.iter().enumerate() {
            let c = budget.column(g);
            let b = &mut budget.columns[c];
            *b = match sync {
                SyncModel::Phase => b.max(l),
                _ => Phases::new(0.0, b.total().max(l.total())),
            };
        }
        budget
    }

    /// Every column's budget times `1 + tol`.
    pub(super) fn scaled(&self, tol: f64) -> Self {
        Budget {
            columns: self.columns.iter().map(|&b| b * (1.0 + tol)).collect(),
            ..self.clone()
        }
    }

    /// The groups: ranks for [`SyncModel::Step`], micro-batches otherwise.
    pub(super) fn groups(&self) -> usize {
        match self.sync {
            SyncModel::Step => self.shape.ranks,
            _ => self.shape.ranks * self.shape.steps,
        }
    }

    /// The group of slot `k`.
    #[inline]
    pub(super) fn group(&self, k: usize) -> usize {
        match self.sync {
            SyncModel::Step => k / self.shape.per_rank(),
            _ => k / self.shape.per_step,
        }
    }

    /// The column of group `g`.
    #[inline]
    pub(super) fn column(&self, g: usize) -> usize {
        match self.sync {
            SyncModel::Step => 0,
            _ => g % self.shape.steps,
        }
    }

    /// The budget of group `g`'s column.
    #[inline]
    pub(super) fn of(&self, g: usize) -> Phases {
        self.columns[self.column(g)]
    }

    /// The room group `g` would have left with load `l` (negative: over
    /// budget): in total, or the lesser of the phases' for
    /// [`SyncModel::Phase`].
    #[inline]
    pub(super) fn room(&self, g: usize, l: Phases) -> f64 {
        let b = self.of(g);
        match self.sync {
            SyncModel::Phase => f64::min(b.vision - l.vision, b.language - l.language),
            _ => b.total() - l.total(),
        }
    }
}
