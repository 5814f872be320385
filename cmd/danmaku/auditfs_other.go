//go:build !linux

package main

// memoryFS says "" off Linux: the roles are deployed on Linux, where
// auditfs_linux.go tells tmpfs and ramfs apart; elsewhere a directory is
// taken as the operator gives it.
func memoryFS(dir string) (string, error) { return "", nil }
