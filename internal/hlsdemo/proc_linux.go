package hlsdemo

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill ffmpeg when the process that started
// it dies, however it dies: a killed dev must not leave a stream writing
// into a temporary directory for ever.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
