package opstest

import (
	"os"
	"syscall"
)

// owner is a file's uid and gid.
func owner(st os.FileInfo) [2]int {
	s := st.Sys().(*syscall.Stat_t)
	return [2]int{int(s.Uid), int(s.Gid)}
}
