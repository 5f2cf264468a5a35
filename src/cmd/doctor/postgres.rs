//! The checks of a shared PostgreSQL ledger: the connection, the schema,
//! the role's rights, and keys stuck in running. The session is made
//! read-only before anything is read; nothing is created or migrated.

use postgres::Client;

use super::{running_keys, schema_version, Level, Report};
use crate::ledger::postgres::{connect_read_only, describe, schema_versions};
use crate::ledger::Owner;

/// What to grant a role so that it can use the ledger.
const GRANT: &str = "GRANT USAGE ON SCHEMA idem TO <role>; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA idem TO <role>";

pub(super) fn examine(url: &str, shown: &str) -> Report {
    let mut report = Report::default();
    let mut client = match connect_read_only(url, shown) {
        Ok(client) => client,
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
    let role = match facts {
        Ok((version, role, database)) => {
            report.ok(
                "connection",
                format!("PostgreSQL {version}, database {database}, role {role}"),
            );
            report.facts.insert("server_version".into(), version.into());
            report.facts.insert("role".into(), role.clone().into());
            role
        }
        Err(error) => {
            report.push(
                "connection",
                Level::Problem,
                format!("cannot read the server's settings: {}", describe(&error)),
                None::<String>,
            );
            return report;
        }
    };
    if schema(&mut client, &role, &mut report) {
        rights(&mut client, &role, &mut report);
        stuck(&mut client, &mut report);
    }
    report
}

/// The schema's version; whether there is a current-enough schema to
/// check further.
fn schema(client: &mut Client, role: &str, report: &mut Report) -> bool {
    let (version, latest) = match schema_versions(client) {
        Ok(versions) => versions,
        Err(error) => {
            report.push(
                "schema",
                Level::Problem,
                format!("cannot read schema idem's version: {}", describe(&error)),
                Some(GRANT.replace("<role>", role)),
            );
            return false;
        }
    };
    report.facts.insert("schema_version".into(), version.into());
    if version == 0 {
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
        return false;
    }
    schema_version(version.into(), latest.into(), report)
}

/// Whether the role can run keys (read and write the three tables) and
/// tidy the ledger (`forget --purge` and `prune` delete).
fn rights(client: &mut Client, role: &str, report: &mut Report) {
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

/// Keys whose head is running, with their owners; an owner on another
/// host is judged by its lease, on the database's clock.
fn stuck(client: &mut Client, report: &mut Report) {
    let rows = client.query(
        "SELECT k.key, r.host, r.pid, k.owner_pgid,
                coalesce(k.lease_until < clock_timestamp(), false)
         FROM idem.keys k JOIN idem.runs r ON r.id = k.head
         WHERE r.status = 'running' ORDER BY k.key",
        &[],
    );
    let owners = rows.and_then(|rows| {
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<_, String>(0)?,
                    Owner {
                        host: row.try_get(1)?,
                        pid: row.try_get::<_, i64>(2)? as u32,
                        pgid: row.try_get::<_, Option<i64>>(3)?.map(|pgid| pgid as u32),
                        alive: Some(!row.try_get::<_, bool>(4)?),
                    },
                ))
            })
            .collect::<Result<Vec<_>, postgres::Error>>()
    });
    match owners {
        Ok(owners) => running_keys(owners, report),
        Err(error) => report.push(
            "running keys",
            Level::Problem,
            format!("cannot be read: {}", describe(&error)),
            None::<String>,
        ),
    }
}
