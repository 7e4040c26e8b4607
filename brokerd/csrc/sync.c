/* sync_close(dir_fds, file_fds): make a flush's descriptors durable without holding the GIL.
 *
 * A flush syncs many files (a container's brokers each have a commit-log segment, consume queues and an index
 * file). Synced one by one from Python, every os.fdatasync gives the GIL back and takes it again, and each
 * take waits for the event loop thread to let go of it: one forced GIL switch per file. Here the GIL is
 * released once for the whole list. The descriptors are duplicates the caller made under each file's lock,
 * so closing a file meanwhile is harmless; all of them are closed here, also after a failure. */
#include "native.h"

#include <errno.h>
#include <unistd.h>

static int fds_of(PyObject *list, int *out, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        long fd = PyLong_AsLong(PyList_GET_ITEM(list, i));
        if (fd < 0 || fd > INT_MAX) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "not a file descriptor");
            return -1;
        }
        out[i] = (int)fd;
    }
    return 0;
}

/* -> 0 when every descriptor was synced, else the errno of the first failure (directories: fsync, files:
 * fdatasync). */
PyObject *sync_close(PyObject *self, PyObject *args) {
    PyObject *dirs, *files;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &dirs, &PyList_Type, &files)) return NULL;
    Py_ssize_t nd = PyList_GET_SIZE(dirs), n = nd + PyList_GET_SIZE(files);
    int *fds = PyMem_Malloc(sizeof(int) * (n ? n : 1));
    if (fds == NULL) return PyErr_NoMemory();
    if (fds_of(dirs, fds, nd) || fds_of(files, fds + nd, n - nd)) { PyMem_Free(fds); return NULL; }
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int rc;
        do rc = i < nd ? fsync(fds[i]) : fdatasync(fds[i]); while (rc < 0 && errno == EINTR);
        if (rc < 0 && err == 0) err = errno;
        close(fds[i]);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(fds);
    return PyLong_FromLong(err);
}
