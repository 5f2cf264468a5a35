//! The checks of a shared PostgreSQL ledger: the connection, how the server
//! replicates and the role's rights are doctor's own questions to the
//! server; the schema and the keys stuck in running are read through the
//! ledger, opened read-only.

use crate::ledger::PostgresClient;

use serde_json::json;

use super::{running, schema, Level, Report};
use crate::ledger::{describe, Inspect, PostgresInspector};

/// What to grant a role so that it can use the ledger.
const GRANT: &str = "GRANT USAGE ON SCHEMA idem TO <role>; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA idem TO <role>";

pub(super) fn examine(url: &str, shown: &str) -> Report {
    let mut report = Report::default();
    let mut ledger = match PostgresInspector::open(url, shown) {
        Ok(ledger) => ledger,
        Err(why) => {
            report.push(
                "connection",
                Level::Problem,
                format!("cannot connect: {why}"),
                Some("check the URL, the password (PGPASSWORD or ~/.pgpass) and that the server is up"),
            );
            return report;
        }
    };
    let Some(role) = connection(ledger.session(), &mut report) else {
        return report;
    };
    replication(ledger.session(), &role, &mut report);
    let unreadable = (
        "cannot read schema idem's version",
        GRANT.replace("<role>", &role),
    );
    let read = ledger.schema();
    let empty = |report: &mut Report| no_schema(ledger.session(), &role, report);
    if schema(read, unreadable, &mut report, empty) {
        rights(ledger.session(), &role, &mut report);
        running(&mut ledger, &mut report);
        super::cycles::check(&mut ledger, &mut report);
    }
    report
}

/// The server, the database and the role, as the session sees them; the
/// role, unless they cannot be read.
fn connection(client: &mut PostgresClient, report: &mut Report) -> Option<String> {
    let facts = client.query_one(
        "SELECT current_setting('server_version'), current_user::text, current_database()::text",
        &[],
    );
    let facts = facts.and_then(|row| {
        Ok((
            row.try_get::<_, String>(0)?,
            row.try_get::<_, String>(1)?,
            row.try_get::<_, String>(2)?,
        ))
    });
    match facts {
        Ok((version, role, database)) => {
            report.ok(
                "connection",
                format!("PostgreSQL {version}, database {database}, role {role}"),
            );
            report.facts.insert("server_version".into(), version.into());
            report.facts.insert("role".into(), role.clone().into());
            Some(role)
        }
        Err(error) => {
            report.push(
                "connection",
                Level::Problem,
                format!("cannot read the server's settings: {}", describe(&error)),
                None::<String>,
            );
            None
        }
    }
}

/// No schema yet: the next `idem run` creates it, if the role may.
fn no_schema(client: &mut PostgresClient, role: &str, report: &mut Report) {
    let may_create = client
        .query_one(
            "SELECT has_database_privilege(current_database(), 'CREATE')",
            &[],
        )
        .is_ok_and(|row| row.try_get::<_, bool>(0).unwrap_or(false));
    if may_create {
        report.push(
            "schema",
            Level::Warn,
            "no schema idem yet; the next `idem run` creates it",
            None::<String>,
        );
    } else {
        report.push(
            "schema",
            Level::Problem,
            format!("no schema idem yet, and role {role} may not create it"),
            Some("let the database's owner run `idem run` once, or GRANT CREATE ON DATABASE to the role"),
        );
    }
}

/// Whether the role can run keys (read and write the three tables) and
/// tidy the ledger (`forget --purge` and `prune` delete).
fn rights(client: &mut PostgresClient, role: &str, report: &mut Report) {
    // One privilege a call: given a list, has_table_privilege answers
    // whether *any* of them is held.
    let row = client.query_one(
        "SELECT has_schema_privilege('idem', 'USAGE'),
                bool_and(has_table_privilege('idem.' || t, p)) FILTER (WHERE p <> 'DELETE'),
                bool_and(has_table_privilege('idem.' || t, p)) FILTER (WHERE p = 'DELETE')
         FROM unnest(ARRAY['keys', 'runs', 'attempts']) t,
              unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) p",
        &[],
    );
    let grant = GRANT.replace("<role>", role);
    let rights = row.and_then(|row| {
        Ok((
            row.try_get::<_, bool>(0)?,
            row.try_get::<_, Option<bool>>(1)?.unwrap_or(false),
            row.try_get::<_, Option<bool>>(2)?.unwrap_or(false),
        ))
    });
    match rights {
        Ok((true, true, true)) => report.ok("rights", format!("role {role} can run, forget and prune")),
        Ok((true, true, false)) => report.push(
            "rights",
            Level::Warn,
            format!("role {role} can run keys but not delete: `forget --purge` and `prune` fail"),
            Some(grant),
        ),
        Ok((false, _, _)) => report.push(
            "rights",
            Level::Problem,
            format!("role {role} may not use schema idem: every `idem run` fails"),
            Some(grant),
        ),
        Ok((true, false, _)) => report.push(
            "rights",
            Level::Problem,
            format!("role {role} cannot read and write idem.keys, idem.runs and idem.attempts: every `idem run` fails"),
            Some(grant),
        ),
        Err(error) => report.push(
            "rights",
            Level::Problem,
            format!("cannot be checked: {}", describe(&error)),
            None::<String>,
        ),
    }
}

/// What makes a committed claim survive a failover.
const SYNCHRONOUS: &str = "set synchronous_standby_names to the standbys a failover may promote, and synchronous_commit = on (or remote_apply)";

/// How the server replicates, as a commit of this session would wait.
struct Replication {
    in_recovery: bool,
    names: String,
    commit: String,
    /// Standbys streaming (base backups aside).
    standbys: i64,
    synchronous: i64,
    /// Standbys whose sync state the role may not see.
    hidden: i64,
}

impl Replication {
    fn read(client: &mut PostgresClient) -> Result<Replication, tokio_postgres::Error> {
        // A role without pg_read_all_stats sees a standby's pid alone.
        let row = client.query_one(
            "WITH s AS (SELECT sync_state FROM pg_stat_replication
                        WHERE coalesce(state, '') <> 'backup')
             SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'),
                    current_setting('synchronous_commit'), (SELECT count(*) FROM s),
                    (SELECT count(*) FROM s WHERE sync_state IN ('sync', 'quorum')),
                    (SELECT count(*) FROM s WHERE sync_state IS NULL)",
            &[],
        )?;
        Ok(Replication {
            in_recovery: row.try_get(0)?,
            names: row.try_get(1)?,
            commit: row.try_get(2)?,
            standbys: row.try_get(3)?,
            synchronous: row.try_get(4)?,
            hidden: row.try_get(5)?,
        })
    }

    /// The check's level, message and fix.
    fn verdict(&self, role: &str) -> (Level, String, Option<String>) {
        let settings = format!(
            "synchronous_standby_names '{}', synchronous_commit {}",
            self.names, self.commit
        );
        let asynchronous = self.standbys - self.synchronous - self.hidden;
        let lose = "a failover can lose a committed claim and run its key twice";
        let (level, message, fix) = if self.in_recovery {
            (
                Level::Problem,
                "the server is a standby (read-only): every `idem run` fails".to_owned(),
                "name the primary, or list every host with ?target_session_attrs=read-write",
            )
        } else if self.standbys == 0 && !self.names.is_empty() && !self.local() {
            (
                Level::Problem,
                format!("no standby streams, yet {settings}: every commit waits for one"),
                "start the standby, or clear synchronous_standby_names",
            )
        } else if self.standbys == 0 {
            let message = "no standby streams: a failover has no copy of the ledger to go to";
            return (Level::Ok, message.to_owned(), None);
        } else if self.hidden > 0 {
            (
                Level::Warn,
                format!(
                    "{} standby(s) stream, but role {role} may not see whether they are synchronous",
                    self.standbys
                ),
                "GRANT pg_read_all_stats TO the role, or read pg_stat_replication as a superuser",
            )
        } else if !self.waits() {
            let message = format!(
                "{} standby(s) stream, {settings}: a commit does not wait for them, so {lose}",
                self.standbys
            );
            (Level::Warn, message, SYNCHRONOUS)
        } else if asynchronous > 0 {
            let message = format!(
                "{} synchronous and {asynchronous} asynchronous standby(s), {settings}: {lose}",
                self.synchronous
            );
            (Level::Warn, message, SYNCHRONOUS)
        } else {
            let message = format!(
                "{} synchronous standby(s), {settings}: a committed claim survives a failover",
                self.synchronous
            );
            return (Level::Ok, message, None);
        };
        (level, message, Some(fix.to_owned()))
    }

    /// Whether a commit waits for no standby whatever the names say.
    fn local(&self) -> bool {
        matches!(self.commit.as_str(), "off" | "local")
    }

    /// Whether a commit waits until the synchronous standbys have it on
    /// disk (`remote_write`: only in their memory).
    fn waits(&self) -> bool {
        matches!(self.commit.as_str(), "on" | "remote_apply")
    }
}

/// Whether a failover could lose a committed claim: an asynchronous
/// standby may be promoted without it, and the key then runs twice. Said
/// as a warning, which leaves doctor's verdict healthy (exit 0): the ledger
/// works, and replicating asynchronously is an operator's trade of safety
/// for commit latency, not a fault; a commit that can never return (no
/// standby for the synchronous names) or a standby in place of the primary
/// is a problem.
fn replication(client: &mut PostgresClient, role: &str, report: &mut Report) {
    let replication = match Replication::read(client) {
        Ok(replication) => replication,
        Err(error) => {
            let why = format!("cannot be read: {}", describe(&error));
            return report.push("replication", Level::Warn, why, None::<String>);
        }
    };
    let r = &replication;
    let asynchronous = r.standbys - r.synchronous - r.hidden;
    report.facts.insert(
        "replication".into(),
        json!({
            "in_recovery": r.in_recovery,
            "standbys": r.standbys,
            "synchronous": r.synchronous,
            "asynchronous": asynchronous,
            "unknown": r.hidden,
            "synchronous_standby_names": r.names,
            "synchronous_commit": r.commit,
        }),
    );
    let (level, message, fix) = r.verdict(role);
    report.push("replication", level, message, fix);
}
