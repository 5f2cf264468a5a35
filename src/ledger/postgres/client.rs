//! A blocking PostgreSQL client that can pipeline.
//!
//! The `postgres` crate waits for each statement's answer before it sends
//! the next, so a transaction of three statements costs five round trips
//! (its `BEGIN` and `COMMIT` each one). Over tokio-postgres, statements
//! given to [`Client::pipeline`] together are sent together and answered
//! in one round trip, which is what keeps a claim and an outcome at two
//! each. Everything else goes one statement at a time, as before.

use std::future::{self, Future};
use std::ops::{Deref, DerefMut};
use std::pin::{pin, Pin};
use std::task::Poll;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::runtime::Runtime;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, Error, Row, SimpleQueryMessage};

/// What the connection's half says on its own: notices, notifications
/// (idem asks for one only: a stop request for a run, see `stops`), and
/// the error that ends it.
pub type Messages = Pin<Box<dyn Stream<Item = Result<AsyncMessage, Error>> + Send>>;

/// The transaction mode of every write (see [`Transaction::begin`]).
pub const READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// How long [`Client::closed`] lets the connection run to see its end.
const CLOSED_WITHIN: std::time::Duration = std::time::Duration::from_millis(1);

/// One connection to the server.
pub struct Client {
    // Declared before `link`, so dropped first: with no client left, the
    // connection says goodbye to the server and ends, which `link` waits for.
    client: tokio_postgres::Client,
    link: Link,
    /// Pipelines run so far: a read kept for later is still the latest
    /// only while no other ran after it.
    pipelines: u64,
}

/// The connection's half: its runtime and the socket's traffic, driven
/// only while idem waits for an answer.
struct Link {
    runtime: Runtime,
    messages: Messages,
    /// A notification came since [`Client::notified`] last asked.
    notified: bool,
}

impl Link {
    fn block_on<T>(&mut self, work: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        let mut work = pin!(work);
        let messages = &mut self.messages;
        let notified = &mut self.notified;
        self.runtime.block_on(future::poll_fn(|cx| {
            loop {
                match messages.as_mut().poll_next(cx) {
                    Poll::Ready(Some(Ok(AsyncMessage::Notification(_)))) => *notified = true,
                    Poll::Ready(Some(Ok(_))) => {}
                    Poll::Ready(Some(Err(error))) => return Poll::Ready(Err(error)),
                    Poll::Ready(None) | Poll::Pending => break,
                }
            }
            work.as_mut().poll(cx)
        }))
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let messages = &mut self.messages;
        self.runtime.block_on(future::poll_fn(|cx| loop {
            match messages.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }));
    }
}

impl Client {
    /// A connection's half, boxed: its type differs with and without TLS.
    pub fn new_link<S, T>(mut connection: tokio_postgres::Connection<S, T>) -> Messages
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        Box::pin(futures_util::stream::poll_fn(move |cx| {
            connection.poll_message(cx)
        }))
    }

    /// The client of a connection made on `runtime` (see
    /// [`super::connect::connect`]).
    pub fn new(runtime: Runtime, client: tokio_postgres::Client, messages: Messages) -> Client {
        Client {
            client,
            link: Link {
                runtime,
                messages,
                notified: false,
            },
            pipelines: 0,
        }
    }

    /// Runs `work` on the connection: the statements it starts at once go
    /// out together, in the order they are started, and their answers come
    /// back in one round trip. A statement after one that failed inside a
    /// transaction fails too, so the first error is the one returned.
    pub fn pipeline<T>(
        &mut self,
        work: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.pipelines += 1;
        let Client { client, link, .. } = self;
        link.block_on(work(client))
    }

    /// How many pipelines ran on this connection.
    pub fn pipelines(&self) -> u64 {
        self.pipelines
    }

    /// Whether the server has closed the connection, found without a
    /// round trip: the connection is driven for a moment (a socket's end
    /// is seen only when the runtime polls it), not waited on.
    pub fn closed(&mut self) -> bool {
        let Client { client, link, .. } = self;
        let messages = &mut link.messages;
        let notified = &mut link.notified;
        let ended = link.runtime.block_on(async {
            let end = future::poll_fn(|cx| loop {
                match messages.as_mut().poll_next(cx) {
                    Poll::Ready(Some(Ok(AsyncMessage::Notification(_)))) => *notified = true,
                    Poll::Ready(Some(Ok(_))) => {}
                    Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                }
            });
            tokio::time::timeout(CLOSED_WITHIN, end).await.is_ok()
        });
        ended || client.is_closed()
    }

    /// Whether a notification came since the last call, found without a
    /// round trip (the connection is driven for a moment, as by
    /// [`Client::closed`]).
    pub fn notified(&mut self) -> bool {
        self.closed();
        std::mem::take(&mut self.link.notified)
    }

    pub fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.pipeline(async |db| db.batch_execute(sql).await)
    }

    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<SimpleQueryMessage>, Error> {
        self.pipeline(async |db| db.simple_query(sql).await)
    }

    pub fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error> {
        self.pipeline(async |db| db.execute(sql, params).await)
    }

    pub fn execute_typed(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<u64, Error> {
        self.pipeline(async |db| db.execute_typed(sql, params).await)
    }

    pub fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Error> {
        self.pipeline(async |db| db.query(sql, params).await)
    }

    pub fn query_one(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, Error> {
        self.pipeline(async |db| db.query_one(sql, params).await)
    }

    pub fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        self.pipeline(async |db| db.query_opt(sql, params).await)
    }

    pub fn query_typed(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        self.pipeline(async |db| db.query_typed(sql, params).await)
    }

    pub fn query_typed_one(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Row, Error> {
        self.pipeline(async |db| db.query_typed_one(sql, params).await)
    }

    pub fn query_typed_opt(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Option<Row>, Error> {
        self.pipeline(async |db| db.query_typed_opt(sql, params).await)
    }
}

/// A transaction on a [`Client`], rolled back unless committed. It is the
/// client too (`Deref`), so statements run on it as on the client.
pub struct Transaction<'a> {
    client: &'a mut Client,
    open: bool,
}

impl<'a> Transaction<'a> {
    /// Sends `begin` (a `BEGIN` with its mode) and waits for it.
    pub fn begin(client: &'a mut Client, begin: &str) -> Result<Transaction<'a>, Error> {
        client.batch_execute(begin)?;
        Ok(Transaction { client, open: true })
    }

    /// A transaction whose `BEGIN` the caller sends in its first pipeline.
    pub fn pipelined(client: &'a mut Client) -> Transaction<'a> {
        Transaction { client, open: true }
    }

    pub fn commit(mut self) -> Result<(), Error> {
        self.open = false;
        self.client.batch_execute("COMMIT")
    }

    /// The caller's pipeline sent `COMMIT`, and it was answered.
    pub fn committed(mut self) {
        self.open = false;
    }

    pub fn rollback(mut self) -> Result<(), Error> {
        self.open = false;
        self.client.batch_execute("ROLLBACK")
    }
}

impl Deref for Transaction<'_> {
    type Target = Client;

    fn deref(&self) -> &Client {
        self.client
    }
}

impl DerefMut for Transaction<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if self.open {
            // The server ends it anyway when the connection goes; on a
            // connection that stays, the next statement must not land in it.
            let _ = self.client.batch_execute("ROLLBACK");
        }
    }
}
