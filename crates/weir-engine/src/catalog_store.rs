//! A persistent catalog (`CREATE CATALOG c WITH ('type' = 'weir', 'path' = …)`): its
//! databases, tables and views as small JSON files in a folder or an object-store bucket,
//! so that what one session defines is there for every later session that creates the
//! catalog on the same path.
//!
//! Layout under the catalog's path (names percent-encoded by `object_store`):
//! `<database>/database.json` marks a database (and holds its comment);
//! `<database>/objects/<name>.json` is one table or view (`{"version": 1, "kind":
//! "table"|"view", "sql": …}`). Tables and views share one namespace per database, as
//! in Flink.
//!
//! Concurrent sessions: each file is written whole and atomically (a local file is
//! renamed into place; an object-store put is atomic), so a reader never sees a torn
//! definition; creating a database, table or view is a conditional put
//! (`PutMode::Create`), so when two sessions create the same name, one wins and the other
//! gets a clear "already exists". A session reads the catalog when it creates it: what
//! other sessions define later is seen by the next session (or after `DROP CATALOG` and
//! `CREATE CATALOG` again).

use futures::TryStreamExt;
use object_store::path::{Path, PathPart};
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use weir_common::{Error, Result};

const VERSION: u32 = 1;
const DATABASE_FILE: &str = "database.json";
const OBJECTS: &str = "objects";

/// A table or view as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredObject {
    pub version: u32,
    pub kind: ObjectKind,
    /// `CREATE TABLE …` (with the option values unmasked) or `CREATE VIEW … AS …`.
    pub sql: String,
    /// Views: the catalog and database their query's names resolve in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_in: Option<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectKind {
    Table,
    View,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredDatabase {
    version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    comment: Option<String>,
}

/// What a catalog's path holds: databases (with their comment) and their objects.
#[derive(Debug, Default)]
pub struct Loaded {
    pub databases: BTreeMap<String, (Option<String>, BTreeMap<String, StoredObject>)>,
}

/// One persistent catalog's files.
#[derive(Debug, Clone)]
pub struct CatalogStore {
    store: Arc<dyn ObjectStore>,
    root: Path,
    /// The `'path'` option, for messages.
    location: String,
}

impl CatalogStore {
    pub fn open(location: &str) -> Result<Self> {
        let (store, root) = weir_runtime::storage::resolve_location(location)?;
        Ok(Self {
            store,
            root,
            location: location.to_string(),
        })
    }

    fn database_dir(&self, database: &str) -> Path {
        self.root.clone().join(PathPart::from(database))
    }

    fn object_path(&self, database: &str, name: &str) -> Path {
        self.database_dir(database)
            .join(OBJECTS)
            .join(PathPart::from(format!("{name}.json").as_str()))
    }

    fn failed(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::External(format!("catalog at '{}': {what}: {e}", self.location))
    }

    /// Everything the catalog holds.
    pub async fn load(&self) -> Result<Loaded> {
        let files: Vec<_> = self
            .store
            .list(Some(&self.root))
            .try_collect()
            .await
            .map_err(|e| self.failed("listing its files", e))?;
        let mut loaded = Loaded::default();
        let mut objects = Vec::new();
        for meta in files {
            let Some(rel) = meta.location.prefix_match(&self.root) else {
                continue;
            };
            let parts: Vec<String> = rel.map(|p| p.as_ref().to_string()).collect();
            let decode = |p: &str| {
                percent_decode(p).ok_or_else(|| self.failed("a file name", format!("'{p}'")))
            };
            match parts.as_slice() {
                [db, file] if file == DATABASE_FILE => {
                    let stored: StoredDatabase = self.read_json(&meta.location).await?;
                    loaded.databases.entry(decode(db)?).or_default().0 = stored.comment;
                }
                [db, dir, file] if dir == OBJECTS && file.ends_with(".json") => {
                    let name = decode(file.trim_end_matches(".json"))?;
                    objects.push((decode(db)?, name, meta.location.clone()));
                }
                // Anything else (a temporary file of a write in progress) is not ours.
                _ => {}
            }
        }
        for (db, name, location) in objects {
            // An object whose database marker is gone was dropped with it (CASCADE deletes
            // objects first, then the marker; a crash in between leaves orphans).
            let Some(entry) = loaded.databases.get_mut(&db) else {
                continue;
            };
            let object: StoredObject = self.read_json(&location).await?;
            if object.version > VERSION {
                return Err(self.failed(
                    &format!("'{db}.{name}'"),
                    format!(
                        "written by a newer Weir (format version {}, this one reads {VERSION})",
                        object.version
                    ),
                ));
            }
            entry.1.insert(name, object);
        }
        Ok(loaded)
    }

    async fn read_json<T: serde::de::DeserializeOwned>(&self, path: &Path) -> Result<T> {
        let bytes = self
            .store
            .get(path)
            .await
            .map_err(|e| self.failed(&format!("reading {path}"), e))?
            .bytes()
            .await
            .map_err(|e| self.failed(&format!("reading {path}"), e))?;
        serde_json::from_slice(&bytes).map_err(|e| self.failed(&format!("{path} is damaged"), e))
    }

    /// Writes `value` at `path`; with `create`, only if nothing is there (`Ok(false)`
    /// when something is).
    async fn put(&self, path: &Path, value: &impl Serialize, create: bool) -> Result<bool> {
        let bytes = serde_json::to_vec_pretty(value).map_err(|e| Error::internal(e.to_string()))?;
        let mode = if create {
            PutMode::Create
        } else {
            PutMode::Overwrite
        };
        match self
            .store
            .put_opts(path, PutPayload::from(bytes), PutOptions::from(mode))
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) if create => Ok(false),
            Err(e) => Err(self.failed(&format!("writing {path}"), e)),
        }
    }

    async fn delete(&self, path: &Path) -> Result<()> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.failed(&format!("deleting {path}"), e)),
        }
    }

    /// Marks a database: `false` when it exists already.
    pub async fn create_database(&self, database: &str, comment: Option<String>) -> Result<bool> {
        let marker = self.database_dir(database).join(DATABASE_FILE);
        let stored = StoredDatabase {
            version: VERSION,
            comment,
        };
        self.put(&marker, &stored, true).await
    }

    /// Deletes a database's objects, then its marker.
    pub async fn drop_database(&self, database: &str) -> Result<()> {
        let objects = self.database_dir(database).join(OBJECTS);
        let files: Vec<_> = self
            .store
            .list(Some(&objects))
            .try_collect()
            .await
            .map_err(|e| self.failed("listing a database", e))?;
        for f in files {
            self.delete(&f.location).await?;
        }
        self.delete(&self.database_dir(database).join(DATABASE_FILE))
            .await
    }

    /// Stores a new table or view; an error when the name is taken (by another session:
    /// this one checked its own catalog first).
    pub async fn create_object(
        &self,
        database: &str,
        name: &str,
        object: &StoredObject,
    ) -> Result<()> {
        if self
            .put(&self.object_path(database, name), object, true)
            .await?
        {
            Ok(())
        } else {
            Err(Error::plan(format!(
                "'{name}' already exists in database '{database}' of the catalog at '{}' \
                 (created by another session)",
                self.location
            )))
        }
    }

    /// Replaces a table or view's definition.
    pub async fn replace_object(
        &self,
        database: &str,
        name: &str,
        object: &StoredObject,
    ) -> Result<()> {
        self.put(&self.object_path(database, name), object, false)
            .await
            .map(|_| ())
    }

    pub async fn delete_object(&self, database: &str, name: &str) -> Result<()> {
        self.delete(&self.object_path(database, name)).await
    }
}

/// Undoes `object_store`'s percent-encoding of a path part.
fn percent_decode(part: &str) -> Option<String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = part.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl StoredObject {
    pub fn table(sql: String) -> Self {
        Self {
            version: VERSION,
            kind: ObjectKind::Table,
            sql,
            resolved_in: None,
        }
    }

    pub fn view(sql: String, resolved_in: (String, String)) -> Self {
        Self {
            version: VERSION,
            kind: ObjectKind::View,
            sql,
            resolved_in: Some(resolved_in),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn objects_round_trip_and_creates_are_exclusive() {
        let dir = std::env::temp_dir().join(format!("weir-catalog-{}", uuid::Uuid::new_v4()));
        let store = CatalogStore::open(&dir.to_string_lossy()).unwrap();
        assert!(
            store
                .create_database("d b", Some("c".into()))
                .await
                .unwrap()
        );
        assert!(!store.create_database("d b", None).await.unwrap());
        let t = StoredObject::table("CREATE TABLE x (a INT) WITH ('connector' = 'datagen')".into());
        store.create_object("d b", "x/y%", &t).await.unwrap();
        let again = store.create_object("d b", "x/y%", &t).await.unwrap_err();
        assert!(again.to_string().contains("already exists"), "{again}");
        let loaded = store.load().await.unwrap();
        let (comment, objects) = &loaded.databases["d b"];
        assert_eq!(comment.as_deref(), Some("c"));
        assert_eq!(objects["x/y%"].sql, t.sql);
        store.drop_database("d b").await.unwrap();
        assert!(store.load().await.unwrap().databases.is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
