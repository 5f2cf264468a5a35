//! `attempts.containment`: what held an attempt's processes together, by
//! its code (schema 13). SQLite keeps 0, 1 and NULL in the row's header
//! alone (2, a cgroup, in one byte), where [`Containment::name`] would take up to 13 bytes of every
//! run. The names are PostgreSQL's and the JSON's; the codes are this
//! file's alone.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

use crate::process::Containment;

/// A [`Containment`] as SQLite stores it; `Option<ContainmentCode>` is
/// the column, NULL where the attempt's was not recorded.
pub(super) struct ContainmentCode(pub Containment);

const GUARDIAN: i64 = 0;
const PID_NAMESPACE: i64 = 1;
const CGROUP: i64 = 2;

impl ToSql for ContainmentCode {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(match self.0 {
            Containment::GuardianOnly => GUARDIAN,
            Containment::PidNamespace => PID_NAMESPACE,
            Containment::Cgroup => CGROUP,
        }))
    }
}

impl FromSql for ContainmentCode {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<ContainmentCode> {
        match value {
            ValueRef::Integer(GUARDIAN) => Ok(ContainmentCode(Containment::GuardianOnly)),
            ValueRef::Integer(PID_NAMESPACE) => Ok(ContainmentCode(Containment::PidNamespace)),
            ValueRef::Integer(CGROUP) => Ok(ContainmentCode(Containment::Cgroup)),
            // Only a hand-edited row, or a newer idem's, holds another.
            ValueRef::Integer(code) => Err(FromSqlError::Other(
                format!("unknown attempt containment {code}").into(),
            )),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

/// `contained` as the column holds it.
pub(super) fn code(contained: Option<Containment>) -> Option<ContainmentCode> {
    contained.map(ContainmentCode)
}
