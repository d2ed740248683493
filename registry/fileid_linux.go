package registry

import (
	"os"
	"syscall"
)

func fileID(fi os.FileInfo) FileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}
	}
	return FileID{
		Dev:     uint64(st.Dev),
		Ino:     st.Ino,
		Size:    st.Size,
		MtimeNs: st.Mtim.Nano(),
		CtimeNs: st.Ctim.Nano(),
	}
}
