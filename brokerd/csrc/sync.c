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

/* Sync the first `ndir` descriptors with fsync (directories), the rest with fdatasync, closing each; 0 when all
 * were synced, else the errno of the first failure. Without the GIL (sync_close releases it, Syncer's threads
 * never hold it). */
static int sync_and_close(const int *fds, Py_ssize_t ndir, Py_ssize_t n) {
    int err = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int rc;
        do rc = i < ndir ? fsync(fds[i]) : fdatasync(fds[i]); while (rc < 0 && errno == EINTR);
        if (rc < 0 && err == 0) err = errno;
        close(fds[i]);
    }
    return err;
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
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = sync_and_close(fds, nd, n);
    Py_END_ALLOW_THREADS
    PyMem_Free(fds);
    return PyLong_FromLong(err);
}

/* ------------------------------------------------------------------ Syncer: fsyncs on threads without the GIL
 *
 * brokerd._native.Syncer(threads): a queue of sync jobs (directory and file descriptors, as sync_close takes
 * them) done by `threads` POSIX threads that never take the GIL; each finished job is announced on an eventfd
 * that the event loop watches (fileno()), and take() returns the finished jobs' (token, errno). With a thread pool
 * of Python threads instead, every job costs GIL hand-offs with the event loop thread (up to the switch interval
 * each while it is busy): a SYNC_FLUSH group commit's round trip grew from the fsync's 0.3 ms to several ms. */
#include <pthread.h>
#include <sys/eventfd.h>

#define SYNCER_MAX_THREADS 8

typedef struct job { struct job *next; long long token; Py_ssize_t ndir, n; int err; int fds[]; } Job;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t cv;
    Job *todo, *todo_tail, *done, *done_tail;
    pthread_t th[SYNCER_MAX_THREADS];
    int nthreads, stop, efd, closed;
    int ready;  /* a finished job waits for take() (read without the mutex by ready()) */
    long long next_token;
} Syncer;

static void *syncer_main(void *arg) {
    Syncer *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->todo == NULL && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        Job *j = s->todo;
        if (j == NULL) break;  /* stopping, and every job is done */
        s->todo = j->next;
        if (s->todo == NULL) s->todo_tail = NULL;
        pthread_mutex_unlock(&s->mu);
        j->err = sync_and_close(j->fds, j->ndir, j->n);
        pthread_mutex_lock(&s->mu);
        j->next = NULL;
        if (s->done_tail) s->done_tail->next = j; else s->done = j;
        s->done_tail = j;
        __atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
        uint64_t one = 1;
        ssize_t w = write(s->efd, &one, sizeof one);
        (void)w;  /* the counter cannot overflow: take() reads it */
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int Syncer_init(Syncer *s, PyObject *args, PyObject *kw) {
    int threads = 1;
    if (!PyArg_ParseTuple(args, "|i", &threads)) return -1;
    if (threads < 1 || threads > SYNCER_MAX_THREADS) {
        PyErr_SetString(PyExc_ValueError, "threads must be 1..8");
        return -1;
    }
    if (s->nthreads) { PyErr_SetString(PyExc_RuntimeError, "Syncer already initialised"); return -1; }
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&s->th[i], NULL, syncer_main, s) != 0) {
            PyErr_SetString(PyExc_OSError, "cannot start a sync thread");
            pthread_mutex_lock(&s->mu); s->stop = 1; pthread_cond_broadcast(&s->cv); pthread_mutex_unlock(&s->mu);
            for (int k = 0; k < i; k++) pthread_join(s->th[k], NULL);
            close(s->efd);
            s->closed = 1;
            return -1;
        }
        s->nthreads = i + 1;
    }
    return 0;
}

/* submit(dir_fds, file_fds) -> token: the descriptors are synced (directories: fsync, files: fdatasync) and
 * closed on a sync thread; take() reports the job once done. They belong to the Syncer from here on. */
static PyObject *Syncer_submit(Syncer *s, PyObject *args) {
    PyObject *dirs, *files;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &dirs, &PyList_Type, &files)) return NULL;
    if (s->closed || !s->nthreads) { PyErr_SetString(PyExc_RuntimeError, "Syncer is closed"); return NULL; }
    Py_ssize_t nd = PyList_GET_SIZE(dirs), n = nd + PyList_GET_SIZE(files);
    Job *j = PyMem_RawMalloc(sizeof(Job) + sizeof(int) * (size_t)(n ? n : 1));
    if (j == NULL) return PyErr_NoMemory();
    if (fds_of(dirs, j->fds, nd) || fds_of(files, j->fds + nd, n - nd)) { PyMem_RawFree(j); return NULL; }
    j->ndir = nd;
    j->n = n;
    j->next = NULL;
    pthread_mutex_lock(&s->mu);
    j->token = ++s->next_token;
    if (s->todo_tail) s->todo_tail->next = j; else s->todo = j;
    s->todo_tail = j;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromLongLong(j->token);
}

/* take() -> [(token, errno)] of the jobs finished since the last take (errno 0: all synced) */
static PyObject *Syncer_take(Syncer *s, PyObject *unused) {
    uint64_t count;
    if (!s->closed && read(s->efd, &count, sizeof count) < 0 && errno != EAGAIN) return PyErr_SetFromErrno(PyExc_OSError);
    pthread_mutex_lock(&s->mu);
    Job *j = s->done;
    s->done = s->done_tail = NULL;
    __atomic_store_n(&s->ready, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&s->mu);
    PyObject *out = PyList_New(0);
    while (j != NULL) {
        Job *next = j->next;
        PyObject *item = out ? Py_BuildValue("(Li)", j->token, j->err) : NULL;
        if (item == NULL || PyList_Append(out, item) < 0) Py_CLEAR(out);
        Py_XDECREF(item);
        PyMem_RawFree(j);
        j = next;
    }
    return out;
}

/* close(): the jobs submitted so far are finished, then the threads stop; take() still reports them. */
static void syncer_stop(Syncer *s) {
    if (s->closed || !s->nthreads) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < s->nthreads; i++) pthread_join(s->th[i], NULL);
    Py_END_ALLOW_THREADS
    s->closed = 1;
}

/* ready() -> bool: a finished job waits for take() (no syscall, no lock: cheap enough to ask on every read) */
static PyObject *Syncer_ready(Syncer *s, PyObject *unused) {
    return PyBool_FromLong(__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE));
}

static PyObject *Syncer_close(Syncer *s, PyObject *unused) {
    syncer_stop(s);
    Py_RETURN_NONE;
}

static PyObject *Syncer_fileno(Syncer *s, PyObject *unused) {
    if (s->closed || !s->nthreads) { PyErr_SetString(PyExc_ValueError, "Syncer is closed"); return NULL; }
    return PyLong_FromLong(s->efd);
}

static void Syncer_dealloc(Syncer *s) {
    syncer_stop(s);
    if (s->nthreads) {
        close(s->efd);
        for (Job *j = s->done; j != NULL;) { Job *next = j->next; PyMem_RawFree(j); j = next; }
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef Syncer_methods[] = {
    {"submit", (PyCFunction)Syncer_submit, METH_VARARGS, "submit(dir_fds, file_fds) -> token"},
    {"take", (PyCFunction)Syncer_take, METH_NOARGS, "take() -> [(token, errno)] of the finished jobs"},
    {"ready", (PyCFunction)Syncer_ready, METH_NOARGS, "a finished job waits for take()"},
    {"fileno", (PyCFunction)Syncer_fileno, METH_NOARGS, "the eventfd that becomes readable when a job finishes"},
    {"close", (PyCFunction)Syncer_close, METH_NOARGS, "finish the submitted jobs and stop the threads"},
    {NULL},
};

PyTypeObject SyncerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "brokerd._native.Syncer",
    .tp_basicsize = sizeof(Syncer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Syncer_init,
    .tp_dealloc = (destructor)Syncer_dealloc,
    .tp_methods = Syncer_methods,
    .tp_doc = "fsyncs on POSIX threads without the GIL, finished jobs announced on an eventfd",
};
