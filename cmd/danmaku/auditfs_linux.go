package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// memoryFS names the in-memory file system dir is on (tmpfs, ramfs), or
// says "" for one that keeps its files across a restart. A directory not
// made yet is judged by its nearest existing parent, where it will be made.
func memoryFS(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		var st unix.Statfs_t
		err := unix.Statfs(d, &st)
		if errors.Is(err, unix.ENOENT) && filepath.Dir(d) != d {
			d = filepath.Dir(d)
			continue
		}
		if err != nil {
			return "", fmt.Errorf("statfs %s: %w", d, err)
		}
		switch st.Type {
		case unix.TMPFS_MAGIC:
			return "tmpfs", nil
		case unix.RAMFS_MAGIC:
			return "ramfs", nil
		}
		return "", nil
	}
}
