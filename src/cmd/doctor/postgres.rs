//! The checks of a shared PostgreSQL ledger: the connection and the role's
//! rights are doctor's own questions to the server; the schema and the keys
//! stuck in running are read through the ledger, opened read-only.

use crate::ledger::PostgresClient;

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
    let unreadable = (
        "cannot read schema idem's version",
        GRANT.replace("<role>", &role),
    );
    let read = ledger.schema();
    let empty = |report: &mut Report| no_schema(ledger.session(), &role, report);
    if schema(read, unreadable, &mut report, empty) {
        rights(ledger.session(), &role, &mut report);
        running(&mut ledger, &mut report);
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
