/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package stage copies a container's overlayfs upper directory inside the
// pause, with one lstat per entry and contents copied in the kernel into one
// file (no inode per file, no fsync, unlike containerd's content store), and
// writes the copy after the thaw as a tar with containerd's headers.
package stage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

// stageCopiers is the number of files copied at once inside the pause.
const stageCopiers = 4

// stageAlign aligns each file's content in the copy to a page.
const stageAlign = 4096

// ContentFile is the file in the copy's directory holding the contents.
const ContentFile = "content"

// Upper is an upper directory captured in the pause: tar headers and contents.
type Upper struct {
	dir     string
	entries []entry
	bytes   int64
}

type entry struct {
	hdr *tar.Header
	// off is where a regular file's content starts in the copy.
	off int64
}

func (e entry) hasContent() bool {
	return e.hdr.Typeflag == tar.TypeReg && e.hdr.Size > 0
}

// noNames leaves user and group names empty, as containerd does: no lookups.
type noNames struct{ fs.FileInfo }

func (noNames) Uname() (string, error) { return "", nil }

func (noNames) Gname() (string, error) { return "", nil }

// Copy copies the upper directory upper into the empty directory dir, leaving
// out sockets as containerd does.
func Copy(ctx context.Context, upper, dir string) (*Upper, error) {
	s := &Upper{dir: dir}
	type job struct {
		rel       string
		id        fileID
		off, size int64
	}
	var (
		jobs  []job
		total int64
	)
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(noNames{fi}, link)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Format = tar.FormatPAX
		hdr.ModTime = hdr.ModTime.Truncate(time.Second)
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && !fi.IsDir() && st.Nlink > 1 {
			key := [2]uint64{st.Dev, st.Ino}
			if first, ok := links[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				s.entries = append(s.entries, entry{hdr: hdr})
				return nil
			}
			links[key] = hdr.Name
		}
		capability, err := lgetxattr(p, "security.capability")
		if err != nil {
			return err
		}
		if len(capability) > 0 {
			hdr.PAXRecords = map[string]string{paxXattr + "security.capability": string(capability)}
		}
		e := entry{hdr: hdr, off: total}
		if e.hasContent() {
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return fmt.Errorf("%s: no inode", p)
			}
			jobs = append(jobs, job{rel: rel, id: fileID{dev: st.Dev, ino: st.Ino}, off: total, size: hdr.Size})
			s.bytes += hdr.Size
			total += (hdr.Size + stageAlign - 1) / stageAlign * stageAlign
		}
		s.entries = append(s.entries, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading upper directory %s: %w", upper, err)
	}
	content := filepath.Join(dir, ContentFile)
	f, err := os.OpenFile(content, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		err = f.Truncate(total)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("making the copy of upper directory %s: %w", upper, err)
	}
	root, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening upper directory %s: %w", upper, err)
	}
	defer unix.Close(root)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan job)
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for range min(stageCopiers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := os.OpenFile(content, os.O_WRONLY, 0)
			if err != nil {
				fail(err)
				for range next {
				}
				return
			}
			defer out.Close()
			for j := range next {
				if err := copyAt(out, root, j.rel, j.id, j.off, j.size); err != nil {
					fail(fmt.Errorf("%s: %w", filepath.Join(upper, j.rel), err))
				}
			}
		}()
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		next <- j
	}
	close(next)
	wg.Wait()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return nil, fmt.Errorf("copying upper directory %s: %w", upper, err)
	}
	return s, nil
}

// paxXattr is the PAX record prefix of extended attributes.
const paxXattr = "SCHILY.xattr."

// lgetxattr is unix.Lgetxattr returning nil if attr is unset or unsupported.
func lgetxattr(p, attr string) ([]byte, error) {
	buf := make([]byte, 128)
	for {
		n, err := unix.Lgetxattr(p, attr, buf)
		switch {
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, len(buf)*4)
			continue
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("reading %s of %s: %w", attr, p, err)
		}
		return buf[:n], nil
	}
}

// fileID is the inode a walk saw at a path.
type fileID struct{ dev, ino uint64 }

// errNotWalked means a path no longer leads to the inode the walk saw.
var errNotWalked = errors.New("not the regular file the walk saw (changed while frozen?)")

// openWalked opens rel beneath root, through no symlink or mount point, and
// checks it is the regular file id the walk saw. The freeze stops only the
// sandbox: a process outside it (a debug container, a pod sharing its PID
// namespace) could swap an entry for a link into another pod's files.
func openWalked(root int, rel string, id fileID) (*os.File, error) {
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return nil, fmt.Errorf("%w: %w", errNotWalked, err)
		}
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != id.dev || st.Ino != id.ino {
		f.Close()
		return nil, errNotWalked
	}
	return f, nil
}

// copyAt copies size bytes of walked file rel into out at off, in the kernel.
func copyAt(out *os.File, root int, rel string, id fileID, off, size int64) error {
	in, err := openWalked(root, rel, id)
	if err != nil {
		return err
	}
	defer in.Close()
	if _, err := out.Seek(off, io.SeekStart); err != nil {
		return err
	}
	n, err := io.Copy(out, &io.LimitedReader{R: in, N: size})
	if err == nil && n != size {
		err = fmt.Errorf("copied %d bytes, want %d (changed while frozen?)", n, size)
	}
	return err
}

// Dirs lists the directories of the staged upper directory, cleaned.
func (s *Upper) Dirs() []string {
	var out []string
	for _, e := range s.entries {
		if e.hdr.Typeflag == tar.TypeDir {
			out = append(out, oci.CleanTarName(e.hdr.Name))
		}
	}
	return out
}

// Entries is the number of entries of the staged upper directory.
func (s *Upper) Entries() int { return len(s.entries) }

// Bytes is the size of the copied contents.
func (s *Upper) Bytes() int64 { return s.bytes }

// WriteTar writes the copy as a tar, whiteouts left as overlayfs char devices.
func (s *Upper) WriteTar(w io.Writer) error {
	f, err := os.Open(filepath.Join(s.dir, ContentFile))
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(w)
	buf := make([]byte, 1<<20)
	for _, e := range s.entries {
		if err := tw.WriteHeader(e.hdr); err != nil {
			return err
		}
		if !e.hasContent() {
			continue
		}
		n, err := io.CopyBuffer(tw, io.NewSectionReader(f, e.off, e.hdr.Size), buf)
		if err == nil && n != e.hdr.Size {
			err = fmt.Errorf("the copy of %s holds %d bytes, want %d", e.hdr.Name, n, e.hdr.Size)
		}
		if err != nil {
			return err
		}
	}
	return tw.Close()
}
