from django.urls import path

from portal.views import (
    account,
    auth,
    disclosure,
    earnings,
    events,
    fleet,
    integrations,
    money,
    notices,
    statements,
)

app_name = "portal"

urlpatterns = [
    path("", fleet.overview, name="home"),
    path("gpus/", fleet.gpu_list, name="gpus"),
    path("gpus/<uuid:gpu_id>/", fleet.gpu_page, name="gpu"),
    path("incidents/", events.incidents, name="incidents"),
    path("incidents/<int:incident_id>/", events.incident, name="incident"),
    path("maintenance/", events.maintenance, name="maintenance"),
    path("maintenance/<int:window_id>/", events.maintenance_window, name="maintenance-window"),
    path("payouts/", money.payouts, name="payouts"),
    path("earnings/", earnings.earnings, name="earnings"),
    path("statements/", statements.statements, name="statements"),
    path("statements/<uuid:statement_id>/", statements.statement, name="statement"),
    path(
        "statements/<uuid:statement_id>/statement.pdf",
        statements.statement_pdf,
        name="statement-pdf",
    ),
    path(
        "statements/<uuid:statement_id>/statement.csv",
        statements.statement_csv,
        name="statement-csv",
    ),
    path(
        "statements/<uuid:statement_id>/statement.json",
        statements.statement_json,
        name="statement-json",
    ),
    path("disclosure/", disclosure.disclosure, name="disclosure"),
    path("settings/partners/", integrations.partners, name="partners"),
    path(
        "settings/partners/<int:grant_id>/revoke/",
        integrations.partner_revoke,
        name="partner-revoke",
    ),
    path("settings/api-keys/", integrations.api_keys, name="api-keys"),
    path(
        "settings/api-keys/<uuid:key_id>/revoke/",
        integrations.api_key_revoke,
        name="api-key-revoke",
    ),
    path("notices/", notices.notices, name="notices"),
    path("settings/notifications/", account.notification_settings, name="notifications"),
    path("settings/security/", account.security, name="security"),
    path("settings/security/2fa/enrol/", account.two_factor_enrol, name="2fa-enrol"),
    path("settings/security/2fa/disable/", account.two_factor_disable, name="2fa-disable"),
    path("settings/security/2fa/recovery-codes/", account.recovery_codes, name="recovery-codes"),
    path(
        "settings/security/sessions/<int:session_id>/revoke/",
        account.session_revoke,
        name="session-revoke",
    ),
    path(
        "settings/security/sessions/revoke-others/",
        account.sessions_revoke_others,
        name="sessions-revoke-others",
    ),
    path("login/", auth.login_view, name="login"),
    path("login/verify/", auth.login_verify, name="login-verify"),
    path("logout/", auth.logout_view, name="logout"),
    path("password-reset/", auth.password_reset, name="password-reset"),
    path("password-reset/sent/", auth.password_reset_sent, name="password-reset-sent"),
    path(
        "password-reset/<uidb64>/<token>/",
        auth.password_reset_confirm,
        name="password-reset-confirm",
    ),
    path("password-reset/done/", auth.password_reset_done, name="password-reset-done"),
]
