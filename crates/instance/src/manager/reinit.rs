//! Re-initialisation as the instance carries it out (the decision is
//! `cnmysql_core::reinit`): claim the one slot, save what only this
//! instance holds, stop the server, replace the data with a clone of the
//! primary, rejoin. A primary that may have acknowledged commits without
//! a replica (`acked_alone.rs`) does not heal itself.

use super::acked_alone;
use super::*;
use cnmysql_api::SavedTransactions;
use cnmysql_core::event::Event;
use cnmysql_core::reinit::{self, Next};

impl<C: ClusterState> Manager<C> {
    /// Whether this instance is to be re-initialised now (asked, or
    /// diverged and allowed to heal itself): the primary to clone, which
    /// the caller passes to [`Self::reinit`] once it has let go of its
    /// connection. Otherwise records why not.
    pub(super) async fn reinit_due(
        &self,
        status: &cnmysql_api::ClusterStatus,
        view: &sql::ServerView,
    ) -> anyhow::Result<Option<String>> {
        let me = self.cfg.instance.as_str();
        let acked_alone = acked_alone::read(&self.cfg);
        let diverged = status.diverged_instances.iter().any(|n| n == me);
        let holds_others_writes = if diverged {
            match self.holds_others_writes(status, view).await {
                Some(h) => h,
                // The primary cannot be read now: decide on the next pass.
                None => return Ok(None),
            }
        } else {
            false
        };
        if !diverged && self.request_if_stranded(status, view).await? {
            return Ok(None);
        }
        let local = reinit::Local {
            acked_alone: acked_alone.as_deref(),
            holds_others_writes,
        };
        match reinit::next(me, &self.cfg.spec, status, local) {
            Next::Nothing => Ok(None),
            Next::KeepOut(why) => {
                if status.diverged_reasons.get(me) != Some(&why) {
                    self.cluster
                        .change(|st| (reinit::note_diverged(st, me, &why), None))
                        .await?;
                }
                Ok(None)
            }
            Next::Wait(why) => {
                self.set_phase(
                    InstancePhase::Running,
                    format!("re-initialisation waits: {why}"),
                );
                Ok(None)
            }
            Next::Reclone { primary } => Ok(Some(primary)),
        }
    }

    /// A replica that cannot catch up because the primary no longer has
    /// the binary logs it needs, and holds nothing the primary lacks, asks
    /// for its own re-initialisation (the request's refusals apply). True
    /// when it asked in this pass.
    async fn request_if_stranded(
        &self,
        status: &cnmysql_api::ClusterStatus,
        view: &sql::ServerView,
    ) -> anyhow::Result<bool> {
        let me = self.cfg.instance.as_str();
        let asked = status.reinit_requests.iter().any(|n| n == me)
            || status.reinitializing.as_deref() == Some(me);
        if asked || !view.replication.as_ref().is_some_and(reinit::stranded) {
            return Ok(false);
        }
        let f = self.cfg.flavor();
        let Some(primary) = status.current_primary.clone() else {
            return Ok(false);
        };
        let Some(theirs) = self
            .peers
            .status(&primary)
            .await
            .filter(|s| s.mysqld_running)
        else {
            return Ok(false);
        };
        let (Ok(mine), Ok(theirs)) = (
            parse_history(f, &view.gtid_executed),
            parse_history(f, &theirs.gtid_executed),
        ) else {
            return Ok(false);
        };
        if !theirs.contains(&mine) {
            return Ok(false);
        }
        let asked = self
            .cluster
            .change(|st| match reinit::request(st, me) {
                Ok(true) => (true, Some(reinit::stranded_event(me, &primary))),
                _ => (false, None),
            })
            .await?;
        Ok(asked)
    }

    /// Whether what this instance holds beyond the primary includes
    /// transactions of another source than its own; `None` when the
    /// primary cannot be read.
    async fn holds_others_writes(
        &self,
        status: &cnmysql_api::ClusterStatus,
        view: &sql::ServerView,
    ) -> Option<bool> {
        let f = self.cfg.flavor();
        let primary = status.current_primary.as_deref()?;
        let theirs = self
            .peers
            .status(primary)
            .await
            .filter(|s| s.mysqld_running)?;
        let mine = parse_history(f, &view.gtid_executed).ok()?;
        let theirs = parse_history(f, &theirs.gtid_executed).ok()?;
        Some(
            mine.sources_missing_from(&theirs)
                .iter()
                .any(|src| *src != view.source_id),
        )
    }

    /// Claim the slot, save what only this instance holds, stop the
    /// server and clone `primary` (see [`Self::reinit_due`]).
    pub(super) async fn reinit(&self, primary: &str, view: &sql::ServerView) -> anyhow::Result<()> {
        let me = self.cfg.instance.clone();
        let claimed = self
            .cluster
            .change(|st| {
                let r = reinit::claim(st, &me);
                let event = r.is_ok().then(|| {
                    Event::new(
                        false,
                        "Reinitializing",
                        Some(&me),
                        format!(
                            "{me}: saving what only it holds, then re-cloning it from {primary}"
                        ),
                    )
                });
                (r, event)
            })
            .await?;
        if let Err(why) = claimed {
            self.set_phase(
                InstancePhase::Running,
                format!("re-initialisation waits: {why}"),
            );
            return Ok(());
        }
        self.set_phase(
            InstancePhase::Cloning,
            "saving the transactions only this instance holds",
        );
        self.save_what_only_i_hold(primary, view).await?;
        self.set_phase(
            InstancePhase::Cloning,
            format!("stopping mysqld to re-clone from {primary}"),
        );
        self.stop_server_for_now().await;
        let data = self.cfg.data_dir.clone();
        tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&data)).await??;
        // The way a new replica gets its data (retried until it works, from
        // whichever instance is the primary then): a manager restarted
        // from here on does the same.
        if self.obtain_data().await? {
            tracing::info!("re-initialised: a fresh clone of the primary");
        }
        Ok(())
    }

    /// Save what this instance holds beyond the primary, and say so in the
    /// status and an event. Nothing beyond: nothing saved.
    async fn save_what_only_i_hold(
        &self,
        primary: &str,
        view: &sql::ServerView,
    ) -> anyhow::Result<()> {
        let f = self.cfg.flavor();
        let theirs = self
            .peers
            .status(primary)
            .await
            .filter(|s| s.mysqld_running)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{primary} does not answer: nothing to compare with, nothing replaced"
                )
            })?;
        let mine = parse_history(f, &view.gtid_executed)?;
        let Some(beyond) = mine.beyond(&parse_history(f, &theirs.gtid_executed)?) else {
            return Ok(());
        };
        let file = crate::saved_transactions::save(&self.cfg, &beyond).await?;
        let object = match crate::saved_transactions::upload(&self.cfg, &file).await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %e, "cannot store the saved transactions in the backup store; the copy on the volume is kept");
                None
            }
        };
        let saved = SavedTransactions {
            instance: self.cfg.instance.clone(),
            time: jiff::Timestamp::now().to_string(),
            gtid_set: beyond.to_string(),
            file: file.display().to_string(),
            object,
        };
        tracing::warn!(gtids = %saved.gtid_set, file = saved.file, "saved the transactions only this instance held");
        let me = self.cfg.instance.clone();
        self.cluster
            .change(|st| {
                reinit::record_saved(st, saved.clone());
                let where_ = saved.object.as_deref().map(|o| format!(" and {o}")).unwrap_or_default();
                let event = Event::new(
                    true,
                    "DivergedTransactionsSaved",
                    Some(&me),
                    format!("{me} held transactions the primary lacks ({}); saved to {}{where_} before it is re-cloned", saved.gtid_set, saved.file),
                );
                ((), Some(event))
            })
            .await
    }

    /// A fresh clone is consistent by construction: no longer diverged,
    /// asked for or being re-initialised.
    pub(super) async fn finish_reinit(&self) -> anyhow::Result<()> {
        let me = self.cfg.instance.clone();
        self.cluster
            .change(|st| {
                let was = st.reinitializing.as_deref() == Some(me.as_str())
                    || st.diverged_instances.contains(&me)
                    || st.reinit_requests.contains(&me);
                reinit::finish(st, &me);
                let event = was.then(|| {
                    Event::new(
                        false,
                        "Reinitialized",
                        Some(&me),
                        format!("{me} re-cloned from the primary and rejoining"),
                    )
                });
                ((), event)
            })
            .await
    }
}
