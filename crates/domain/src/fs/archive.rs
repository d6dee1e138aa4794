//! `files_archive`: tar.gz or zip archives of files and directory trees.
//!
//! The archive is written to an unnamed temp file (never held in memory),
//! stopping as soon as it passes `max_bytes`; the caller then streams it.
//! Members are read through descriptors of the walk, so nothing outside the
//! roots or denied by the policy is packed: such entries are left out, and a
//! symlink is kept only when its target is allowed.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{readlinkat, OFlag};
use nix::sys::stat::Mode;

use super::list::visible;
use super::meta::{utc_parts, Kind, Stat};
use super::safe::{self, dir_flags, Resolved};
use super::walk::{walk, Flow};
use super::FsError;
use crate::policy::{Op, PathGuard};

/// An archive format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// gzip-compressed tar.
    TarGz,
    /// zip with deflate.
    Zip,
}

impl Format {
    /// Parses `tar.gz` or `zip`.
    pub fn from_name(name: &str) -> Option<Format> {
        match name {
            "tar.gz" => Some(Format::TarGz),
            "zip" => Some(Format::Zip),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::TarGz => "tar.gz",
            Format::Zip => "zip",
        }
    }
}

/// A finished archive: a temp file positioned at its start.
#[derive(Debug)]
pub struct Built {
    /// The archive's bytes.
    pub file: File,
    /// Its size.
    pub len: u64,
}

/// Packs `targets` into an archive of `format`.
///
/// # Errors
/// 404 for a missing target, 400 over `max_files`, 413 over `max_bytes`,
/// 507 when the temp file's disk is full.
pub fn build(
    guard: &PathGuard,
    targets: &[Resolved],
    format: Format,
    max_files: u64,
    max_bytes: u64,
) -> Result<Built, FsError> {
    for target in targets {
        if super::list::stat_of(guard, target)?.is_none() {
            return Err(FsError::NotFound(format!("Path not found: {}", target.path.display())));
        }
    }
    let mut members = Vec::new();
    for target in targets {
        collect(guard, target, &mut members, max_files)?;
    }
    let temp = tempfile::tempfile().map_err(|e| FsError::internal("cannot create a temp file", e))?;
    let mut sink = Limited { file: temp, written: 0, limit: max_bytes, no_space: false };
    let packed = match format {
        Format::TarGz => pack_tar(guard, &members, &mut sink),
        Format::Zip => pack_zip(guard, &members, &mut sink),
    };
    if sink.written > max_bytes {
        return Err(FsError::ArchiveTooLarge { limit: max_bytes });
    }
    if sink.no_space {
        // The temp file is unnamed: the kernel frees what was written.
        return Err(FsError::NoSpace(std::env::temp_dir()));
    }
    packed.map_err(|e| FsError::internal("cannot write the archive", e))?;
    let mut file = sink.file;
    let len = file.seek(io::SeekFrom::End(0)).map_err(|e| FsError::internal("cannot read the archive", e))?;
    if len > max_bytes {
        return Err(FsError::ArchiveTooLarge { limit: max_bytes });
    }
    file.rewind().map_err(|e| FsError::internal("cannot read the archive", e))?;
    Ok(Built { file, len })
}

/// One archive member: where it is and what it is called inside.
struct Member {
    path: PathBuf,
    name: String,
    stat: Stat,
    link: Option<std::ffi::OsString>,
}

fn collect(guard: &PathGuard, target: &Resolved, members: &mut Vec<Member>, max_files: u64) -> Result<(), FsError> {
    let base = super::file_name(&target.path);
    let Some(stat) = super::list::stat_of(guard, target)? else { return Ok(()) };
    let too_many = |n: usize| FsError::Invalid(format!("Too many files ({n}+), limit is {max_files}"));
    let mut files = members.iter().filter(|m| !m.stat.is_dir()).count() as u64;
    if !stat.is_dir() {
        members.push(Member { path: target.path.clone(), name: base, stat, link: None });
        return if files + 1 > max_files { Err(too_many(members.len())) } else { Ok(()) };
    }
    members.push(Member { path: target.path.clone(), name: base.clone(), stat, link: None });
    let dir = safe::open(guard, target, dir_flags(), Mode::empty(), Op::Read)?;
    let mut over = false;
    walk(dir, &target.path, &mut |entry| {
        if !visible(guard, entry) {
            return Flow::Skip;
        }
        let rel = entry.path.strip_prefix(&target.path).unwrap_or(&entry.path);
        let link = match entry.stat.kind {
            Kind::Symlink => match readlinkat(entry.dir, entry.name) {
                Ok(link) => Some(link),
                Err(_) => return Flow::Skip,
            },
            _ => None,
        };
        let name = format!("{base}/{}", rel.display());
        members.push(Member { path: entry.path.clone(), name, stat: entry.stat, link });
        if !entry.stat.is_dir() {
            files += 1;
        }
        if files > max_files {
            over = true;
            return Flow::Stop;
        }
        Flow::Descend
    })
    .map_err(|e| FsError::errno(&target.path, e))?;
    if over {
        return Err(too_many(members.len()));
    }
    Ok(())
}

/// Opens a member's content (a symlink's allowed target) without following symlinks.
fn open_member(guard: &PathGuard, member: &Member) -> io::Result<File> {
    let target = member.path.to_str().and_then(|p| safe::resolve(guard, p, Op::Read, "").ok());
    let target = target.ok_or_else(|| io::Error::other("member left the allowed directories"))?;
    let file = safe::open(guard, &target, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Mode::empty(), Op::Read)
        .map(File::from)
        .map_err(|e| io::Error::other(e.to_string()))?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

fn pack_tar(guard: &PathGuard, members: &[Member], sink: &mut Limited) -> io::Result<()> {
    let gz = flate2::write::GzEncoder::new(sink, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for member in members {
        let mut header = tar::Header::new_gnu();
        header.set_mode(member.stat.mode & 0o7777);
        header.set_mtime(u64::try_from(member.stat.modified.secs).unwrap_or(0));
        match member.stat.kind {
            Kind::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                tar.append_data(&mut header, format!("{}/", member.name), io::empty())?;
            }
            Kind::Symlink => {
                let Some(link) = &member.link else { continue };
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                tar.append_link(&mut header, &member.name, Path::new(link))?;
            }
            Kind::File => {
                let Ok(file) = open_member(guard, member) else { continue };
                let len = file.metadata()?.len();
                header.set_size(len);
                // A file that grows meanwhile is cut at the announced size.
                tar.append_data(&mut header, &member.name, io::Read::take(file, len))?;
            }
        }
    }
    tar.into_inner()?.finish()?.flush()
}

fn pack_zip(guard: &PathGuard, members: &[Member], sink: &mut Limited) -> io::Result<()> {
    use zip::write::SimpleFileOptions;
    let mut zip = zip::ZipWriter::new(sink);
    for member in members {
        let (y, mo, d, h, mi, s) = utc_parts(member.stat.modified.secs);
        let when = zip::DateTime::from_date_and_time(
            u16::try_from(y).unwrap_or(1980),
            u8::try_from(mo).unwrap_or(1),
            u8::try_from(d).unwrap_or(1),
            u8::try_from(h).unwrap_or(0),
            u8::try_from(mi).unwrap_or(0),
            u8::try_from(s).unwrap_or(0),
        )
        .unwrap_or_default();
        let options = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(member.stat.mode & 0o7777)
            .last_modified_time(when)
            .large_file(member.stat.size >= u64::from(u32::MAX));
        if member.stat.is_dir() {
            zip.add_directory(format!("{}/", member.name), options).map_err(io::Error::other)?;
            continue;
        }
        let Ok(mut file) = open_member(guard, member) else { continue };
        zip.start_file(member.name.clone(), options).map_err(io::Error::other)?;
        io::copy(&mut file, &mut zip)?;
    }
    zip.finish().map_err(io::Error::other)?.flush()
}

/// A file that refuses to grow past `limit` bytes.
struct Limited {
    file: File,
    written: u64,
    limit: u64,
    /// A write found the temp file's disk full (the archive writers may wrap the error).
    no_space: bool,
}

impl Write for Limited {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written + buf.len() as u64 > self.limit {
            self.written = self.limit + 1;
            return Err(io::Error::other("archive over the size limit"));
        }
        let n = self.file.write(buf).inspect_err(|e| {
            let errno = e.raw_os_error().map(nix::errno::Errno::from_raw);
            self.no_space |= matches!(errno, Some(nix::errno::Errno::ENOSPC | nix::errno::Errno::EDQUOT));
        })?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Seek for Limited {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        self.file.seek(pos)
    }
}
