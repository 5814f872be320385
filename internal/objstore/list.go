package objstore

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Lister is the optional side of a Store that enumerates and deletes keys:
// what a batch log kept in object storage (the audit trail) needs to be
// read back by time and to be held to a retention. Segments never need it
// (their keys are computed, and a bucket lifecycle rule expires them), so
// it is apart from Store. MemoryStore, DirStore and S3Store implement it.
type Lister interface {
	// List calls fn with each key that starts with prefix and sorts after
	// startAfter ("" = from the first), in byte order, until fn returns
	// false or the keys run out. Keys written while a listing runs may or
	// may not be seen.
	List(ctx context.Context, prefix, startAfter string, fn func(key string) bool) error
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

var (
	_ Lister = (*MemoryStore)(nil)
	_ Lister = (*DirStore)(nil)
	_ Lister = (*S3Store)(nil)
)

// checkPrefix accepts "" or a key prefix that CheckKey would accept once
// completed (a trailing "/" allowed), so a listing cannot climb out of the
// store.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := CheckKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return fmt.Errorf("objstore: list prefix %q: %w", prefix, err)
	}
	return nil
}

// List implements Lister.
func (s *MemoryStore) List(ctx context.Context, prefix, startAfter string, fn func(string) bool) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	s.mu.Lock()
	keys := make([]string, 0, len(s.objs))
	for k := range s.objs {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	slices.Sort(keys)
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !fn(k) {
			return nil
		}
	}
	return nil
}

// Delete implements Lister.
func (s *MemoryStore) Delete(_ context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objs, key)
	return nil
}

// List implements Lister. It walks the directory (sidecars, temporary
// files and objects without a sidecar are not objects and are skipped, as
// Get skips them) and sorts the keys, so it costs a walk of the prefix's
// directories: fine for the one node of embedded mode.
func (s *DirStore) List(ctx context.Context, prefix, startAfter string, fn func(string) bool) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	// Walk from the deepest directory the prefix names, not the root.
	dir := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dir = prefix[:i]
	}
	start := filepath.Join(s.root, filepath.FromSlash(dir))
	var keys []string
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if notExist(err) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			// A directory whose every key sorts before startAfter is
			// skipped whole: reading the last minutes of a long log walks
			// only their directories.
			if rel, err := filepath.Rel(s.root, p); err == nil && rel != "." {
				dk := filepath.ToSlash(rel) + "/"
				if dk < startAfter && !strings.HasPrefix(startAfter, dk) {
					return filepath.SkipDir
				}
			}
			return nil
		}
		name := d.Name()
		if strings.HasSuffix(name, metaSuffix) || strings.HasPrefix(name, ".tmp-") {
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) || key <= startAfter {
			return nil
		}
		if _, err := os.Stat(p + metaSuffix); err != nil {
			return nil // half written (no sidecar yet): invisible, as to Get
		}
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		return fmt.Errorf("objstore: list %s: %w", prefix, err)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !fn(k) {
			return nil
		}
	}
	return nil
}

// Delete implements Lister. The sidecar goes first, so a crash in between
// leaves an invisible file, never an object without its headers; the
// directories the key emptied are removed up to the root.
func (s *DirStore) Delete(_ context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range []string{p + metaSuffix, p} {
		if err := os.Remove(f); err != nil && !notExist(err) {
			return fmt.Errorf("objstore: delete %s: %w", key, err)
		}
	}
	root := filepath.Clean(s.root)
	for d := filepath.Dir(p); d != root && strings.HasPrefix(d, root); d = filepath.Dir(d) {
		if os.Remove(d) != nil { // not empty (or gone): stop
			break
		}
	}
	return nil
}

// List implements Lister with ListObjectsV2 (1,000 keys a page). The
// caller's credentials need s3:ListBucket on the bucket.
func (s *S3Store) List(ctx context.Context, prefix, startAfter string, fn func(string) bool) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	in := &s3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket),
		Prefix: aws.String(s.prefix + prefix),
	}
	if startAfter != "" {
		in.StartAfter = aws.String(s.prefix + startAfter)
	}
	p := s3.NewListObjectsV2Paginator(s.client, in)
	for p.HasMorePages() {
		// Each page is one call: through the breaker, within CallTimeout.
		var page *s3.ListObjectsV2Output
		err := s.guard(ctx, func(ctx context.Context) (err error) {
			page, err = p.NextPage(ctx)
			return err
		})
		if err != nil {
			return fmt.Errorf("objstore: s3 list %s: %w", prefix, err)
		}
		for _, o := range page.Contents {
			key, ok := strings.CutPrefix(aws.ToString(o.Key), s.prefix)
			if !ok {
				continue
			}
			if !fn(key) {
				return nil
			}
		}
	}
	return nil
}

// Delete implements Lister (s3:DeleteObject). S3 answers a missing key
// with success, as Lister asks.
func (s *S3Store) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return fmt.Errorf("objstore: s3 delete %q: %w", key, err)
	}
	err := s.guard(ctx, func(ctx context.Context) error {
		_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
			Bucket: aws.String(s.bucket),
			Key:    aws.String(s.prefix + key),
		})
		return err
	})
	if err != nil {
		if code, status := apiError(err); code == "NoSuchKey" || status == 404 && code != "NoSuchBucket" {
			return nil
		}
		return fmt.Errorf("objstore: s3 delete %s: %w", key, err)
	}
	return nil
}
