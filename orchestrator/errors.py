"""The errors a user can cause or meet, each with its documented exit code.

    0 ok · 1 the job failed · 2 bad input (job file, flags) · 3 nothing fits the budget/deadline
    4 credentials missing or refused (a cloud's, or a Ray head's token) · 5 provisioning failed everywhere
    6 `dlrun catalog refresh`: some sources failed (their previous rows kept), others were refreshed
    7 `dlrun catalog refresh`: nothing was refreshed (every source that was due failed)
    130 interrupted (Ctrl-C) · 143 terminated (SIGTERM: the job is cancelled as on Ctrl-C)

Which code a job's end gives: states.EXIT_BY_STATUS (a table keyed by the job status, built from these).
"""

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NOTHING_FITS = 3
EXIT_CREDENTIALS = 4
EXIT_PROVISIONING = 5
EXIT_REFRESH_PARTIAL = 6
EXIT_REFRESH_FAILED = 7
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process SIGTERM ended


class DlrunError(Exception):
    """An error that ends a command with one line on stderr and an exit code (never a traceback)."""

    exit_code = EXIT_JOB_FAILED

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class SpecError(DlrunError):
    """The job file or a flag is wrong: names the file, the field (and line) and the fix."""

    exit_code = EXIT_BAD_INPUT


class UsageError(DlrunError):
    exit_code = EXIT_BAD_INPUT


class NothingFitsError(DlrunError):
    exit_code = EXIT_NOTHING_FITS

    def __init__(self, message: str, plan=None):
        super().__init__(message)
        self.plan = plan


class CloudCredentialsError(DlrunError):
    exit_code = EXIT_CREDENTIALS


class ProvisioningFailedError(DlrunError):
    exit_code = EXIT_PROVISIONING


class RefreshPartialError(DlrunError):
    exit_code = EXIT_REFRESH_PARTIAL


class RefreshFailedError(DlrunError):
    exit_code = EXIT_REFRESH_FAILED


class JobFailedError(DlrunError):
    exit_code = EXIT_JOB_FAILED


class CloudUnreachableError(DlrunError):
    """A re-attaching supervisor could not ask the cloud about a live cluster (credentials gone, network
    down): the job is left RECOVERING with its cluster for the next `dlrun status`, never marked FAILED."""

    exit_code = EXIT_CREDENTIALS
